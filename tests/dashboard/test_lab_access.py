"""A dashboard for a lab (issue 56): `looplab dashboard` listens beyond loopback only behind a sign-in
proxy (dashboard/access.py), and then shows nothing to a session the proxy did not vouch for.

The browser test serves the dashboard on a host of a test cluster (its own address, 10.213.N.2, in a
network namespace: tests/cluster/netns.py) and opens it in headless Chromium from another host: straight
to the port, with a forged user header, and with the proxy's two headers."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.request

import pytest

from looplab.dashboard import access
from looplab.lab.cli import main
from looplab.model.errors import ConfigError
from tests.cluster import netns
from tests.dashboard.browser import ROOT, require_chromium

SECRET = "s3cret-of-the-lab-proxy-0123456789"


def test_listening_beyond_loopback_needs_the_proxy_and_its_secret():
    access.check_listen("127.0.0.1", "none", {})
    access.check_listen("::1", "none", {})
    access.check_listen("localhost", "none", {})
    for address in ("0.0.0.0", "10.213.5.2", "::", "lab-box"):
        with pytest.raises(ConfigError, match=r"--address: .*`--auth proxy` and \$LOOPLAB_DASHBOARD_SECRET"):
            access.check_listen(address, "none", {})
    with pytest.raises(ConfigError, match="--auth proxy: set \\$LOOPLAB_DASHBOARD_SECRET"):
        access.check_listen("0.0.0.0", "proxy", {access.SECRET_ENV: "short"})
    access.check_listen("0.0.0.0", "proxy", {access.SECRET_ENV: SECRET})
    with pytest.raises(ConfigError, match="--auth: expected one of none, proxy"):
        access.check_listen("127.0.0.1", "oidc", {})


def test_the_cli_refuses_before_anything_listens(capsys, fixture_db):
    url, _ = fixture_db
    assert main(["--db", url, "dashboard", "--address", "0.0.0.0", "--port", "8597"]) == 2
    err = capsys.readouterr().err
    assert "--address: 0.0.0.0 is reachable beyond this machine" in err and "docs/lab.md" in err


def test_only_the_proxy_s_secret_makes_a_user_signed_in():
    good = {access.SECRET_HEADER: SECRET, access.USER_HEADER: "alice"}
    assert access.signed_in_user(good, SECRET) == "alice"
    assert access.signed_in_user({access.USER_HEADER: "alice"}, SECRET) is None  # a browser's forgery
    assert access.signed_in_user({**good, access.SECRET_HEADER: SECRET[:-1]}, SECRET) is None
    assert access.signed_in_user({**good, access.USER_HEADER: "alice<script>"}, SECRET) is None
    assert access.signed_in_user(good, "") is None  # no secret configured: nobody


@pytest.mark.browser
@pytest.mark.multinode
@pytest.mark.skipif(bool(netns.available()), reason=netns.available() or "n/a")
def test_a_browser_on_another_host_sees_the_lab_only_through_the_proxy(fixture_db, tmp_path):
    require_chromium()
    pytest.importorskip("playwright.sync_api")
    _, path = fixture_db
    cluster = netns.Cluster(["dash", "you"])
    try:
        db = cluster.shared / "looplab.db"
        shutil.copyfile(path, db)
        host = cluster["dash"]
        env = {**os.environ, "PYTHONPATH": str(ROOT), access.SECRET_ENV: SECRET}
        argv = [sys.executable, "-m", "looplab", "--db", str(db), "dashboard", "--address", host.addr]
        host.spawn([*argv, "--port", "8600", "--auth", "proxy"], cwd=ROOT, env=env, log=tmp_path / "dash.log")
        base = f"http://{host.addr}:8600"
        deadline = time.time() + 90
        while time.time() < deadline:  # the client host reaches the server's address: it is up
            probe = cluster["you"].run(
                [
                    sys.executable,
                    "-c",
                    f"import urllib.request as u; print(u.urlopen('{base}/_stcore/health').read())",
                ],
                env=env,
            )
            if "ok" in probe.stdout:
                break
            time.sleep(1)
        else:
            pytest.fail(f"the dashboard did not start: {(tmp_path / 'dash.log').read_text()[-2000:]}")
        with pytest.raises(OSError):  # and this machine itself has no way to it: it is another host
            urllib.request.urlopen(f"{base}/_stcore/health", timeout=2)
        ran = cluster["you"].run(
            [sys.executable, "-m", "tests.dashboard.lab_client", f"{base}/queue", SECRET, "alice"],
            cwd=ROOT,
            env=env,
            timeout=240,
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        seen = json.loads(ran.stdout.strip().splitlines()[-1])
    finally:
        cluster.close()
    for refused in ("direct", "forged"):
        assert "Not signed in" in seen[refused], seen[refused][:500]
        assert "All jobs" not in seen[refused] and "study" not in seen[refused]
    assert "signed in as alice" in seen["proxied"] and "All jobs" in seen["proxied"], seen["proxied"][:2000]
    assert "Not signed in" not in seen["proxied"]
    assert cluster.leftovers() == []
