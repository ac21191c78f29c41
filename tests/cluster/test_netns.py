"""The test cluster itself (tests/cluster/netns.py): hosts with their own addresses, hostnames and /tmp,
reachable from each other and from nowhere else; each fault does what it says and is undone; the
cluster leaves nothing behind. Marked `multinode`: the fast tier skips it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.cluster import netns

pytestmark = [pytest.mark.multinode]
if netns.available():
    pytestmark.append(pytest.mark.skip(reason=netns.available()))

HOSTS = ("head", "worker1", "worker2", "pg", "driver2")
SERVER = textwrap.dedent(
    """
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 7001)); s.listen(8)
    while True:
        c, peer = s.accept(); c.sendall(socket.gethostname().encode()); c.close()
    """
)
CLIENT = textwrap.dedent(
    """
    import socket, sys
    try:
        c = socket.create_connection((sys.argv[1], 7001), timeout=1.5); print(c.recv(64).decode())
    except OSError as e:
        print(f"unreachable: {type(e).__name__}")
    """
)


@pytest.fixture(scope="module")
def cluster():
    made = netns.Cluster(HOSTS)
    yield made
    made.close()
    assert made.leftovers() == []


def reach(cluster, src: str, dst: str) -> str:
    return cluster[src].run([sys.executable, "-c", CLIENT, cluster[dst].addr], timeout=30).stdout.strip()


@pytest.fixture(scope="module")
def servers(cluster):
    for name in HOSTS:
        cluster[name].spawn([sys.executable, "-c", SERVER])
    for name in HOSTS:  # each is listening
        for _ in range(100):
            if reach(cluster, "head", name) == name:
                break
    return cluster


def test_each_host_has_its_own_address_hostname_and_tmp(cluster):
    addrs = set()
    for name in HOSTS:
        host = cluster[name]
        assert host.run(["hostname"]).stdout.strip() == name
        shown = host.run(["ip", "-4", "-o", "addr", "show", "eth0"]).stdout
        assert f"inet {host.addr}/24" in shown
        addrs.add(host.addr)
        host.run(["sh", "-c", f"echo {name} > /tmp/whoami"])
    assert len(addrs) == len(HOSTS)
    for name in HOSTS:  # /tmp is the host's own: each sees only its own file
        assert cluster[name].run(["cat", "/tmp/whoami"]).stdout.strip() == name
    assert subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip() not in HOSTS


def test_the_shared_directory_is_one_file_system_for_all_hosts(cluster):
    cluster["worker1"].run(["sh", "-c", f"echo from-worker1 > {cluster.shared}/note"])
    assert cluster["head"].run(["cat", f"{cluster.shared}/note"]).stdout.strip() == "from-worker1"


def test_hosts_reach_each_other_and_no_route_leads_out(servers):
    assert reach(servers, "driver2", "pg") == "pg"
    assert reach(servers, "worker2", "head") == "head"
    routes = servers["head"].run(["ip", "route"]).stdout
    assert "default" not in routes  # nothing outside the namespaces is reachable


def test_a_partition_cuts_a_host_off_and_heals(servers):
    servers.partition("worker1")
    try:
        assert reach(servers, "head", "worker1").startswith("unreachable")
        assert reach(servers, "head", "worker2") == "worker2"
    finally:
        servers.heal("worker1")
    assert reach(servers, "head", "worker1") == "worker1"


def test_a_cut_between_two_hosts_leaves_the_others(servers):
    servers.cut("head", "pg")
    try:
        assert reach(servers, "head", "pg").startswith("unreachable")
        assert reach(servers, "pg", "head").startswith("unreachable")
        assert reach(servers, "driver2", "pg") == "pg"
    finally:
        servers.mend("head", "pg")
    assert reach(servers, "head", "pg") == "pg"


def test_pause_stops_a_host_answering_and_resume_brings_it_back(servers):
    assert servers.pause("worker2")
    try:
        assert reach(servers, "head", "worker2").startswith(
            "unreachable"
        )  # accepted by the kernel, never answered
    finally:
        servers.resume("worker2")
    assert reach(servers, "head", "worker2") == "worker2"


def test_kill_ends_every_process_of_a_host_and_it_can_run_again(servers):
    assert servers.kill("driver2")
    assert reach(servers, "head", "driver2").startswith("unreachable")
    assert servers["driver2"].pids() == []
    servers["driver2"].spawn([sys.executable, "-c", SERVER])  # the machine is still there: a reboot
    for _ in range(100):
        if reach(servers, "head", "driver2") == "driver2":
            break
    assert reach(servers, "head", "driver2") == "driver2"


def test_fill_disk_fills_the_shared_file_system(cluster):
    filler = cluster.fill_disk()
    try:
        with pytest.raises(OSError) as e:
            (cluster.shared / "more").write_bytes(b"x" * (1 << 20))
        assert e.value.errno == 28  # ENOSPC
    finally:
        filler.unlink()
        (cluster.shared / "more").unlink(missing_ok=True)
    (cluster.shared / "more").write_bytes(b"x" * 1024)
