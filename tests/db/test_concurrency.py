"""One process writes 20,000 metric points while another reads the views: no "database is locked".

This is the situation of a running queue with the dashboard open: WAL lets the read-only reader see
committed batches while the writer goes on, and the busy timeout absorbs the short checkpoints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from looplab.orchestrator.db import engine

REPO = Path(__file__).resolve().parents[2]
N_POINTS = 20_000


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.db.concurrent_clients", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_writer_and_reader_processes_do_not_lock_each_other_out(tmp_path):
    # SQLite only: "database is locked", WAL and the busy timeout are SQLite's; a PostgreSQL server
    # has row-level concurrency (the many-drivers tests exercise it)
    db = str(tmp_path / "looplab.db")
    engine(db)  # created (and migrated) before the reader opens it read-only
    ready, done, out = tmp_path / "ready", tmp_path / "done", tmp_path / "seen.json"
    w = _spawn("writer", db, str(N_POINTS), "500", str(ready), str(done))
    r = _spawn("reader", db, str(ready), str(done), str(out))
    w_out, w_err = w.communicate(timeout=180)
    r_out, r_err = r.communicate(timeout=180)
    assert w.returncode == 0, w_err[-3000:]
    assert r.returncode == 0, r_err[-3000:]
    assert "locked" not in w_err + r_err

    report = json.loads(out.read_text())
    assert report["errors"] == []
    curves = [c for c, _ in report["seen"]]
    assert curves == sorted(curves), "the reader saw the number of points go down"
    assert curves[-1] == N_POINTS
    assert all(runs in (0, 1) for _, runs in report["seen"])
    assert report["seen"][-1][1] == 1
