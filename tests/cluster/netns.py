"""A test cluster of hosts with their own addresses on this one machine: network namespaces joined by
veth pairs to a bridge, each host with its own hostname and /tmp, and a shared directory for artifacts
like a lab's shared file system.

Why each part: looplab tells drivers apart by hostname and pid (orchestrator/drivers.py); two "hosts"
that shared a UTS namespace would let one driver see the other's processes as its own and skip the
fencing a test means to exercise, and Ray keeps its sockets and session files under /tmp. So each host
is one long-lived init process made by `ip netns exec NS unshare --uts --mount --propagation private
--fork`, which sets the hostname and mounts a tmpfs on /tmp; every later process of the host enters the
same namespaces with `nsenter --target INIT --net --uts --mount`. The bridge lives in a namespace of its
own (the switch), so nothing is added to the machine's own network: the hosts' addresses (10.213.N.0/24,
a private range) exist only inside these namespaces and no route leads out of them.

The shared directory (under /var/tmp: a directory under /tmp would be hidden by each host's own /tmp)
is a size-limited tmpfs mounted before the hosts are made (their mount namespaces
are copies taken after it, so all see the same files; the size lets a test fill the disk).

What it needs: root, iproute2 (`ip`), util-linux (`unshare`, `nsenter`, `mount`). The commands are the
ones below and nothing else; `Cluster.close` undoes every one of them and `leftovers` checks it did.

Faults are methods: `kill` (SIGKILL every process of a host but its init, as a power cut leaves the
machine), `partition` / `heal` (its link down / up), `cut` / `mend` (a blackhole route between two
hosts, both ways), `pause` / `resume` (SIGSTOP / SIGCONT every process of the host), `fill_disk`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "llc"  # every namespace, link and mount of a cluster starts with this and the cluster's id


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def available() -> str:
    """Why a cluster cannot be built here ("" when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "nsenter", "mount"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"{tool} is not installed (iproute2 / util-linux)"
    return ""


@dataclass
class Host:
    """One host: its network namespace, address, hostname and init process (the machine itself)."""

    name: str
    ns: str
    addr: str
    init: subprocess.Popen | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)

    def _enter(self, cwd: str | os.PathLike | None = None) -> list[str]:
        assert self.init is not None, f"host {self.name} is not up"
        wd = [f"--wd={cwd}"] if cwd else []
        return ["nsenter", f"--target={self.init.pid}", "--net", "--uts", "--mount", *wd, "--"]

    def spawn(self, argv: Sequence[str], cwd=None, env=None, log: Path | None = None) -> subprocess.Popen:
        """Start `argv` on this host in a session of its own (stdout and stderr to `log`, else dropped)."""
        out = open(log, "ab") if log else subprocess.DEVNULL  # the child holds it; ours closes with the test
        proc = subprocess.Popen(
            [*self._enter(cwd), *argv],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def run(
        self, argv: Sequence[str], cwd=None, env=None, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        """Run `argv` on this host to completion; its output is returned."""
        return subprocess.run(
            [*self._enter(cwd), *argv], env=env, capture_output=True, text=True, timeout=timeout
        )

    def pids(self) -> list[int]:
        """Every process in the host's network namespace except its init (and the init's unshare)."""
        out = _ip("netns", "pids", self.ns, check=False).stdout.split()
        keep = {self.init.pid} if self.init else set()
        if self.init:
            keep |= {int(p) for p in _children(self.init.pid)}
        return [int(p) for p in out if int(p) not in keep]

    def signal(self, sig: int) -> list[int]:
        """Send `sig` to every process of the host but its init; the pids signalled."""
        hit = []
        for pid in self.pids():
            try:
                os.kill(pid, sig)
                hit.append(pid)
            except ProcessLookupError:
                pass
        return hit


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


class Cluster:
    """Hosts named `names` on one bridge, with a shared directory of `shared_mb` MB (see the module)."""

    def __init__(self, names: Sequence[str], shared_mb: int = 256, cid: int | None = None) -> None:
        why = available()
        if why:
            raise RuntimeError(f"cannot build a cluster here: {why}")
        self.cid = cid if cid is not None else os.getpid() % 200 + 20
        self.tag = f"{PREFIX}{self.cid}"
        self.switch = f"{self.tag}-sw"
        # outside /tmp: every host has a /tmp of its own, which would hide a directory under it
        self.root = Path(tempfile.mkdtemp(prefix=f"{self.tag}-", dir="/var/tmp"))
        self.shared = self.root / "shared"
        self.hosts: dict[str, Host] = {}
        self._made: list[str] = []  # namespaces, for teardown
        self._mounted = False
        try:
            self._build(names, shared_mb)
        except BaseException:
            self.close()
            raise

    def _build(self, names: Sequence[str], shared_mb: int) -> None:
        self.shared.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                f"size={shared_mb}m,mode=1777",
                f"{self.tag}-shared",
                str(self.shared),
            ],
            check=True,
            timeout=30,
        )
        self._mounted = True
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, name in enumerate(names, start=2):
            self._add_host(name, i)

    def _add_host(self, name: str, index: int) -> None:
        ns, addr = f"{self.tag}-{name}", f"10.213.{self.cid}.{index}"
        outer, inner = f"{self.tag}v{index}o", f"{self.tag}v{index}i"
        _ip("netns", "add", ns)
        self._made.append(ns)
        _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
        _ip("link", "set", inner, "netns", ns)
        _ip("link", "set", outer, "netns", self.switch)
        _ip("-n", ns, "link", "set", inner, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "set", outer, "master", "br0")
        _ip("-n", self.switch, "link", "set", outer, "up")
        host = Host(name, ns, addr)
        script = f"hostname {name} && mount -t tmpfs -o size=512m,mode=1777 {self.tag}-tmp /tmp && exec sleep infinity"
        host.init = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                "unshare",
                "--uts",
                "--mount",
                "--propagation",
                "private",
                "--fork",
                "sh",
                "-c",
                script,
            ],
            start_new_session=True,
        )
        self.hosts[name] = host
        deadline = time.monotonic() + 10
        while host.run(["hostname"]).stdout.strip() != name:  # the init has set it up
            if time.monotonic() > deadline:
                raise RuntimeError(f"host {name} did not come up")
            time.sleep(0.05)

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    # ------------------------------------------------------------ faults

    def kill(self, name: str) -> list[int]:
        """A power cut: SIGKILL every process of host `name` (the machine, its init, stays)."""
        return self.hosts[name].signal(signal.SIGKILL)

    def pause(self, name: str) -> list[int]:
        return self.hosts[name].signal(signal.SIGSTOP)

    def resume(self, name: str) -> list[int]:
        return self.hosts[name].signal(signal.SIGCONT)

    def partition(self, name: str) -> None:
        """Cut host `name` off from every other (its link down); its processes keep running."""
        _ip("-n", self.hosts[name].ns, "link", "set", "eth0", "down")

    def heal(self, name: str) -> None:
        host = self.hosts[name]
        _ip("-n", host.ns, "link", "set", "eth0", "up")
        _ip("-n", host.ns, "route", "replace", f"10.213.{self.cid}.0/24", "dev", "eth0", check=False)

    def cut(self, a: str, b: str) -> None:
        """Cut hosts `a` and `b` off from each other only (a blackhole route on both sides)."""
        for x, y in ((a, b), (b, a)):
            _ip("-n", self.hosts[x].ns, "route", "add", "blackhole", f"{self.hosts[y].addr}/32")

    def mend(self, a: str, b: str) -> None:
        for x, y in ((a, b), (b, a)):
            _ip("-n", self.hosts[x].ns, "route", "del", "blackhole", f"{self.hosts[y].addr}/32", check=False)

    def fill_disk(self, leave_bytes: int = 0) -> Path:
        """Fill the shared directory's file system (all but `leave_bytes`); the filler file is returned
        (delete it to free the space)."""
        filler = self.shared / ".filler"
        st = os.statvfs(self.shared)
        size = st.f_bavail * st.f_frsize - leave_bytes
        # unbuffered: whatever else writes there meanwhile (a running job) may take the last bytes, and a
        # buffered file would then raise on close; the disk is full either way
        with open(filler, "wb", buffering=0) as f:
            chunk = b"\0" * (1 << 20)
            try:
                while size > 0:
                    size -= f.write(chunk[: min(len(chunk), size)])
            except OSError:
                pass
        return filler

    # ------------------------------------------------------------ teardown

    def close(self) -> None:
        """Stop every process of every host, delete every namespace (with its links) and the shared
        mount. Safe to call twice."""
        for host in self.hosts.values():
            host.signal(signal.SIGCONT)
            host.signal(signal.SIGKILL)
            if host.init is not None and host.init.poll() is None:
                os.killpg(host.init.pid, signal.SIGKILL)
                host.init.wait(timeout=10)
            for proc in host.procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait(timeout=10)
        for ns in reversed(self._made):
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _ip("netns", "del", ns, check=False)
        self._made.clear()
        if self._mounted:
            subprocess.run(["umount", "-l", str(self.shared)], capture_output=True, timeout=30)
            self._mounted = False
        shutil.rmtree(self.root, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of this cluster is still on the machine: namespaces, links, mounts (empty when clean)."""
        out = [
            f"namespace {line.split()[0]}"
            for line in _ip("netns", "list").stdout.splitlines()
            if line.startswith(f"{self.tag}-")
        ]
        out += [
            f"link {line.strip()}" for line in _ip("-o", "link").stdout.splitlines() if f"{self.tag}v" in line
        ]
        out += [
            f"mount {line}"
            for line in Path("/proc/self/mounts").read_text().splitlines()
            if f"{self.tag}-" in line
        ]
        return out
