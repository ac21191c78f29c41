"""Two database clients run as separate processes by test_concurrency.py.

    python -m tests.db.concurrent_clients writer DB N BATCH READY DONE
    python -m tests.db.concurrent_clients reader DB READY DONE OUT

The writer logs N metric points in batches through `engine()` (as the scheduler's writer does);
the reader polls the `runs` and `curves` views through `readonly_engine()` (as the dashboard does)
until the writer is done, and writes what it saw to OUT as JSON. Files coordinate start and end.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from sqlalchemy import insert, text

from looplab.orchestrator.db import engine, readonly_engine, session
from looplab.orchestrator.schema import GridRow, Job, Metric


def writer(db: str, n: int, batch: int, ready: Path, done: Path) -> None:
    eng = engine(db)
    with session(eng) as s:
        s.add(GridRow(id=1, name="conc", spec="{}", spec_hash="conc", created_at=time.time()))
        s.add(
            Job(
                id=1,
                grid_id=1,
                kind="train",
                config="{}",
                config_hash="conc",
                recipe="lean",
                size="tiny",
                seed=0,
                status="running",
                created_at=time.time(),
            )
        )
    deadline = time.time() + 60
    while not ready.exists() and time.time() < deadline:  # let the reader get going first
        time.sleep(0.01)
    for start in range(0, n, batch):
        rows = [
            {
                "job_id": 1,
                "key": "train_loss",
                "step": i,
                "tokens": 64 * i,
                "wall_s": i / 100,
                "value": 1 / (i + 1),
            }
            for i in range(start, min(n, start + batch))
        ]
        with session(eng) as s:
            s.execute(insert(Metric), rows)
        time.sleep(0.005)  # a scheduler flushes periodically; give the reader room to interleave
    done.touch()


def reader(db: str, ready: Path, done: Path, out: Path) -> None:
    seen: list[list[int]] = []
    errors: list[str] = []
    eng = readonly_engine(db)
    ready.touch()
    while True:
        finished = done.exists()  # read once more after the writer finished
        try:
            with eng.connect() as c:
                curves = c.execute(text("SELECT COUNT(*) FROM curves")).scalar()
                runs = c.execute(text("SELECT COUNT(*) FROM runs")).scalar()
            seen.append([curves, runs])
        except Exception as e:  # recorded, not raised: the test reports every failure
            errors.append(f"{type(e).__name__}: {e}")
        if finished or len(errors) > 20:
            break
        time.sleep(0.01)  # poll like a dashboard, without starving the writer of CPU
    out.write_text(json.dumps({"seen": seen, "errors": errors}))


if __name__ == "__main__":
    role, db, *rest = sys.argv[1:]
    if role == "writer":
        writer(db, int(rest[0]), int(rest[1]), Path(rest[2]), Path(rest[3]))
    else:
        reader(db, Path(rest[0]), Path(rest[1]), Path(rest[2]))
