"""Each dashboard page reads as the signed-in person's own database role (issue 56; dashboard/access.py).

A throw-away PostgreSQL with password authentication; `looplab db grant` makes two members (alice, bob),
a reader (erin), the driver's role (drv) and the dashboard's login role (dash, `--as dashboard`: no rights
of its own). Then an admin takes erin out of the lab (`REVOKE looplab_reader FROM erin`), which leaves her
role one the dashboard may read as but one that may read nothing. What the policies distinguish on reads
is this: every granted person reads every job (row-level security lets everybody read), while a role
without a lab group, and the dashboard's own role, read nothing. So the tests show: alice's and bob's
sessions run as alice and bob (`current_user`) and read; the same query as dash itself, or as erin, is
refused by the database; a user with no granted role (or a group role, a superuser, the driver, the
dashboard itself, a hostile name) is refused before anything is read, with the line that says what to do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from looplab import Grid, Queue
from looplab.dashboard import access
from looplab.orchestrator import frames
from looplab.orchestrator.db import readonly_engine
from looplab.orchestrator.roles import DASHBOARD
from tests.dashboard.browser import ROOT, free_port, require_chromium
from tests.orchestrator import fake_jobs
from tests.pg import lab_database, password_server

PASSWORDS = {"alice": "a-pw-1", "bob": "b-pw-2", "erin": "e-pw-3", "drv": "d-pw-4", "dash": "s-pw-5"}
KINDS = {"alice": "member", "bob": "member", "erin": "reader", "drv": "driver", "dash": "dashboard"}
SECRET = "the-lab-proxy-secret-0123456789abcdef"
REFUSED_NAMES = ("zed", "postgres", "looplab_admin", DASHBOARD, "dash", "drv", "Alice", "x' OR 'a'='a")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with password_server("super-pw-0") as server:
        urls = lab_database(server, {r: (KINDS[r], pw) for r, pw in PASSWORDS.items()}, fake_jobs)
        server.execute("REVOKE looplab_reader FROM erin")  # out of the lab; still a person of the dashboard
        tmp = tmp_path_factory.mktemp("lab")
        for n, person in enumerate(("alice", "bob")):
            q = Queue(db=urls[person], artifacts=tmp / "art", kinds=fake_jobs)
            q.submit(Grid(f"{person}-study", base={"tokens": 100}, sweep={"seed": [2 * n, 2 * n + 1]}))
        yield server, urls


def _who_reads(url: str) -> tuple[str, str, int]:
    with frames.engine(url).connect() as conn:
        return tuple(conn.exec_driver_sql("SELECT current_user, session_user, count(*) FROM jobs").one())


def test_each_person_reads_as_their_own_role_and_nobody_else_reads(lab):
    _, urls = lab
    base = urls["dash"]
    seen = {person: _who_reads(access.person_url(base, person)) for person in ("alice", "bob")}
    assert seen == {"alice": ("alice", "dash", 4), "bob": ("bob", "dash", 4)}
    assert "a-pw-1" not in access.person_url(base, "alice")  # dash's URL: alice's password is never needed
    readonly_engine(base)  # the dashboard's own role sees the schema's revision, and nothing more
    with pytest.raises(sa.exc.ProgrammingError, match="permission denied for table jobs"):
        _who_reads(base)
    erin = access.person_url(base, "erin")  # a person of the dashboard whose role may read nothing
    with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
        _who_reads(erin)
    with readonly_engine(urls["alice"]).connect() as conn:  # the read-only session still holds as alice
        with pytest.raises(sa.exc.DBAPIError, match="read-only transaction"):
            conn.exec_driver_sql("UPDATE jobs SET priority = 1")


def test_a_user_without_a_granted_role_is_refused_before_anything_is_read(lab):
    _, urls = lab
    base = urls["dash"]
    refused = []
    for name in REFUSED_NAMES:
        with pytest.raises(access.NoRole) as e:
            access.person_url(base, name)
        assert str(e.value) == (
            f"no database role for {name}; ask an admin to run `looplab db grant {name} --as member` (or reader)"
        )
        refused.append(name)
    assert len(refused) == len(REFUSED_NAMES)
    with pytest.raises(access.NoRole, match=r"dashboard's database role \(bob\) cannot read as the people"):
        access.person_url(urls["bob"], "alice")  # served as a member's role: it may not become alice
    # the name reaches SQL only as a bound parameter: a hostile one is just a name that is not granted
    hostile = "alice' OR '1'='1"
    with sa.create_engine(base, poolclass=sa.pool.NullPool).connect() as conn:
        row = conn.execute(sa.text(access.GRANTED), {"group": DASHBOARD, "user": hostile}).one()
        assert tuple(row) == (True, False)
        assert conn.execute(sa.text(access.GRANTED), {"group": DASHBOARD, "user": "alice"}).one() == (
            True,
            True,
        )


def _serve(url: str, port: int, log) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), access.SECRET_ENV: SECRET}
    argv = [sys.executable, "-m", "looplab", "--db", url, "dashboard", "--address", "127.0.0.1"]
    return subprocess.Popen(
        [*argv, "--port", str(port), "--auth", "proxy"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.browser
def test_each_person_s_pages_in_a_browser_read_as_their_role(lab, tmp_path):
    require_chromium()
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    from tests.dashboard.browser import ARGS, CHROMIUM

    _, urls = lab
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    expect = {  # user (and path) -> what their page must show
        ("alice", "/queue"): "database role: alice",
        ("bob", "/queue"): "database role: bob",
        ("erin", "/queue"): "the database refused to read as role erin: permission denied",
        ("zed", "/queue"): "no database role for zed; ask an admin to run looplab db grant zed --as member",
        ("looplab_admin", "/queue"): "no database role for looplab_admin",
        ("alice", "/queue?db=sqlite:////tmp/other.db"): "?db=: not accepted behind the sign-in proxy",
    }
    with open(tmp_path / "dash.log", "w") as log:
        proc = _serve(urls["dash"], port, log)
        try:
            _wait_up(base, proc, tmp_path / "dash.log")

            def browse() -> dict:
                with sync_playwright() as playwright:
                    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                    try:
                        return {
                            (user, path): _shown(
                                browser,
                                base + path,
                                {access.USER_HEADER: user, access.SECRET_HEADER: SECRET},
                                [
                                    expect[(user, path)],
                                    *(READ if user in ("alice", "bob") and "?" not in path else []),
                                ],
                            )
                            for user, path in expect
                        }
                    finally:
                        browser.close()

            # in a thread of its own: Playwright's sync API refuses a thread whose asyncio loop is marked
            # running, which CI once found this test's xdist worker to be after an earlier test
            with ThreadPoolExecutor(1) as pool:
                seen = pool.submit(browse).result()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    log_text = (tmp_path / "dash.log").read_text()
    for (user, path), text in seen.items():
        assert expect[(user, path)] in text, f"{user} {path}: {text[:1500]}\n{log_text[-1500:]}"
    for user in ("alice", "bob"):  # each reads the lab's jobs, as themselves only
        text = seen[(user, "/queue")]
        assert all(r in text for r in READ), text[-3000:]  # both members' 4 jobs, read
        others = {"alice", "bob"} - {user}
        assert not any(f"database role: {o}" in text for o in others) and "database role: dash" not in text
    for refused in [k for k in seen if k[0] not in ("alice", "bob") or "?db=" in k[1]]:
        assert "database role:" not in seen[refused] and "All jobs" not in seen[refused], refused
    assert "options=" not in seen[("erin", "/queue")]  # the dashboard's URL, not its per-person one
    assert "s-pw-5" not in log_text and all(pw not in str(seen) for pw in PASSWORDS.values())


READ = ["queued\n\n4", "All jobs"]  # the Queue page read the 4 jobs (alice's 2 and bob's 2)


def _shown(browser, url: str, headers: dict[str, str], needles: list[str]) -> str:
    """The page's text once it shows every one of `needles` at once (the Queue page reruns every few
    seconds, blanking parts while it does), or the last text seen after 90 s."""
    import time

    context = browser.new_context(extra_http_headers=headers)
    try:
        page = context.new_page()
        page.goto(url, timeout=60_000)
        deadline, text = time.time() + 90, ""
        while time.time() < deadline:
            text = page.inner_text("body")
            if all(n in text for n in needles):
                break
            time.sleep(0.3)
        return text
    finally:
        context.close()


def _wait_up(base: str, proc: subprocess.Popen, log) -> None:
    import time
    import urllib.request

    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the dashboard exited: {log.read_text()[-2000:]}")
        try:
            if urllib.request.urlopen(f"{base}/_stcore/health", timeout=1).read() == b"ok":
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the dashboard did not start: {log.read_text()[-2000:]}")
