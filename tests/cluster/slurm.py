"""A real SLURM (Debian's slurmctld, slurmd, munge) on the namespace cluster (tests/cluster/lab.py):
the controller on host `ctl`, compute nodes `c1` and `c2`, PostgreSQL on `pg`, all under the cluster's
own directories, torn down with it.

What a namespace host lacks, and how the configuration works around it: no cgroups of its own
(ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, no accounting gather); no system munge, so
each host runs its own munged with one shared key, its socket under the host's own /tmp, the same path
on every host (AuthInfo=socket=...: each host's daemons and commands find their own); the daemons'
state, spool and pid files under each host's /tmp, their logs in the cluster's log directory;
NodeAddr/NodeHostname are the namespace hosts' addresses and hostnames. Every command (sbatch,
scontrol, squeue) finds the configuration through $SLURM_CONF.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.cluster.lab import LabCluster

HOSTS = ("pg", "ctl", "c1", "c2")
COMPUTE = ("c1", "c2")
MUNGE_SOCKET = "/tmp/munge/munge.socket"  # each host's own /tmp
# each host's directories, and the cgroup mount slurmd insists on finding even with proctrack/linuxproc
# (a network namespace's /sys hides the machine's): the freezer hierarchy, mounted again, read only
PREPARE = (
    "mkdir -p -m 0755 /tmp/munge /tmp/slurmd /tmp/slurmctld && mount -t tmpfs cgroup_root /sys/fs/cgroup && "
    "mkdir /sys/fs/cgroup/freezer && mount -t cgroup -o ro,freezer freezer /sys/fs/cgroup/freezer"
)


def available() -> str:
    """Why a SLURM cluster cannot be made here ("" when it can)."""
    for tool in ("slurmctld", "slurmd", "munged", "sbatch", "scontrol"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install -y slurmctld slurmd munge slurm-client)"
    return ""


def slurm_conf(lab: LabCluster, logs: Path, cpus: int) -> str:
    net = lab.net
    nodes = "\n".join(
        f"NodeName={n} NodeAddr={net[n].addr} NodeHostname={n} CPUs={cpus} State=UNKNOWN" for n in COMPUTE
    )
    return f"""ClusterName=llc{net.cid}
SlurmctldHost=ctl({net["ctl"].addr})
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket={MUNGE_SOCKET}
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/tmp/slurmctld
SlurmdSpoolDir=/tmp/slurmd
SlurmctldPidFile=/tmp/slurmctld.pid
SlurmdPidFile=/tmp/slurmd.pid
SlurmctldLogFile={logs}/slurmctld.log
SlurmdLogFile={logs}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=600
KillWait=20
OverTimeLimit=0
Waittime=0
SlurmctldParameters=enable_configless
{nodes}
PartitionName=main Nodes={",".join(COMPUTE)} Default=YES MaxTime=INFINITE State=UP
"""


class SlurmLab:
    """The lab cluster with munge and SLURM up (`close` stops all of it)."""

    def __init__(self, cache: Path, cpus: int = 1) -> None:
        self.lab = LabCluster(cache, hosts=HOSTS, client="ctl")
        try:
            self.logs = self.lab.logs
            self.conf = self.lab.net.root / "slurm.conf"
            self.conf.write_text(slurm_conf(self.lab, self.logs, cpus))
            (self.lab.net.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
            self.lab.env["SLURM_CONF"] = str(self.conf)
            self.key = self.lab.net.root / "munge.key"
            self.key.write_bytes(os.urandom(1024))
            self.key.chmod(0o400)
            for name in ("ctl", *COMPUTE):
                self._munged(name)
            self._daemon("ctl", ["slurmctld", "-D", "-f", str(self.conf)])
            for name in COMPUTE:
                self._daemon(name, ["slurmd", "-D", "-f", str(self.conf)])
            self.wait_idle()
        except BaseException:
            self.lab.close()
            raise

    def _munged(self, name: str) -> None:
        host = self.lab.net[name]
        made = host.run(["sh", "-c", PREPARE])
        assert made.returncode == 0, made.stderr
        argv = [
            "munged",
            "--foreground",
            "--force",
            f"--socket={MUNGE_SOCKET}",
            f"--key-file={self.key}",
            "--pid-file=/tmp/munge/munged.pid",
            "--seed-file=/tmp/munge/munged.seed",
            f"--log-file={self.logs}/munged-{name}.log",
        ]
        host.spawn(argv, env=self.lab.env, log=self.logs / f"munged-{name}.out")
        end = time.monotonic() + 20
        while host.run(["test", "-S", MUNGE_SOCKET]).returncode != 0:
            assert time.monotonic() < end, (self.logs / f"munged-{name}.out").read_text()
            time.sleep(0.1)

    def _daemon(self, name: str, argv: list[str]) -> None:
        self.lab.net[name].spawn(argv, env=self.lab.env, log=self.logs / f"{argv[0]}-{name}.out")

    def slurm(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """A SLURM command on the controller host (the cluster's submit host)."""
        return self.lab.net["ctl"].run(list(argv), env=self.lab.env, timeout=timeout, cwd=self.lab.net.shared)

    def node_states(self) -> dict[str, str]:
        out = self.slurm("sinfo", "-h", "-N", "-o", "%N %t")
        return dict(line.split() for line in out.stdout.splitlines() if line.strip())

    def wait_idle(self, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while True:
            states = self.node_states()
            if all(states.get(n, "").startswith("idle") for n in COMPUTE):
                return
            logs = "\n".join(self.tail(f, 1500) for f in ("slurmctld.log", "slurmd-c1.out", "slurmd-c1.log"))
            assert time.monotonic() < end, f"SLURM nodes not idle: {states}\n{logs}"
            time.sleep(0.5)

    def tail(self, log: str, n: int = 3000) -> str:
        path = self.logs / log
        return path.read_text(errors="replace")[-n:] if path.exists() else f"(no {log})"

    def jobs(self) -> list[tuple[str, str, str, str]]:
        """(job id, state, reason, nodes) of every job the controller knows (MinJobAge keeps ended ones)."""
        out = self.slurm("squeue", "-h", "-t", "all", "-o", "%i|%T|%r|%N")
        return [tuple(line.split("|")) for line in out.stdout.splitlines() if line.strip()]

    def limit_now(self, job: str) -> None:
        """Bring allocation `job`'s time limit near: the next whole minute at least a minute away, so
        SLURM's own warning (`--signal`, when more than 90 s before the limit) comes at its next check of
        the limits, within 30 s, and the allocation has that minute to hand its jobs back."""
        out = self.slurm("squeue", "-h", "-j", job, "-o", "%M")
        parts = [int(x) for x in out.stdout.strip().replace("-", ":").split(":")]
        elapsed = sum(v * m for v, m in zip(reversed(parts), (1, 60, 3600, 86400), strict=False))
        minutes = elapsed // 60 + 2
        update = self.slurm("scontrol", "update", f"jobid={job}", f"timelimit={minutes}")
        assert update.returncode == 0, update.stderr

    def close(self) -> None:
        self.lab.close()

    def leftovers(self, settle_s: float = 20) -> list[str]:
        """The cluster's own leftovers, and any SLURM or munge process that survived it (no one else runs
        them here); a step daemon's zombie is given `settle_s` to be reaped once its parent is gone."""
        end = time.monotonic() + settle_s
        while True:
            out = self.lab.net.leftovers()
            for tool in ("slurmctld", "slurmd", "slurmstepd", "munged"):
                found = subprocess.run(["pgrep", "-a", "-x", tool], capture_output=True, text=True).stdout
                out += [f"process {line}" for line in found.splitlines()]
            if self.lab.net.root.exists():
                out.append(f"directory {self.lab.net.root}")
            if not out or time.monotonic() > end:
                return out
            time.sleep(0.5)
