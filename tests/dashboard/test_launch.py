"""`looplab dashboard`: the Streamlit command line and the database handed to the app."""

from __future__ import annotations

import argparse

import pytest

from looplab.dashboard import launch


def test_cli_dashboard_runs_streamlit_on_localhost_with_resolved_db(monkeypatch, fixture_db):
    url, path = fixture_db
    calls = []

    class FakeProc:
        def __init__(self, cmd, env):
            calls.append((cmd, env))

        def wait(self, timeout=None):
            return 0

        def poll(self):
            return 0

    monkeypatch.setattr(launch.subprocess, "Popen", FakeProc)
    assert launch.cli_dashboard(argparse.Namespace(db=str(path), port=8599)) == 0
    ((cmd, env),) = calls
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[4].endswith("dashboard/app.py")
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "8599"
    assert cmd[cmd.index("--server.headless") + 1] == "true"
    assert cmd[cmd.index("--client.toolbarMode") + 1] == "viewer"  # no Deploy menu
    assert env["LOOPLAB_DB"] == url


def test_app_config_hides_the_deploy_menu_for_a_plain_streamlit_run():
    """`streamlit run dashboard/app.py` from any directory reads dashboard/.streamlit/config.toml."""
    import tomllib
    from pathlib import Path

    config = tomllib.loads((Path(launch.APP).parent / ".streamlit" / "config.toml").read_text())
    assert config["client"]["toolbarMode"] == "viewer"


def test_cli_dashboard_refuses_a_missing_database(tmp_path):
    from looplab.orchestrator.errors import DatabaseError

    with pytest.raises(DatabaseError, match="no database at"):
        launch.cli_dashboard(argparse.Namespace(db=str(tmp_path / "none.db"), port=8501))
    assert not (tmp_path / "none.db").exists()
