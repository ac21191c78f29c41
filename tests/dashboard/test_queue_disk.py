"""The Queue page's disk line: the bytes under the jobs' artifact dirs (jobs.artifact_dir) and what
`looplab gc` would free of them, worked out from files of known sizes."""

from __future__ import annotations

import sqlalchemy as sa

from looplab import Grid, Queue
from looplab.orchestrator.retention import fmt_bytes
from looplab.workers.artifacts import CHECKPOINT, FINAL
from tests.dashboard.test_pages import render, text_of
from tests.orchestrator import artifact_jobs


def test_queue_page_shows_the_artifacts_disk_and_what_gc_would_free(monkeypatch, tmp_path):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=artifact_jobs)
    done, kept, running = q.submit(
        [
            Grid("d", base={"seed": 0}),
            Grid("k", base={"seed": 1}, retention="all"),
            Grid("r", base={"seed": 2}),
        ]
    )
    sizes = {done: (3000, 1000), kept: (5000, 2000), running: (7000, 0)}  # checkpoint.pt, final.pt
    with q.eng.begin() as conn:
        for job, (ckpt, final) in sizes.items():
            d = tmp_path / "art" / str(job)
            (d / "eval").mkdir(parents=True)
            (d / CHECKPOINT).write_bytes(b"c" * ckpt)
            if final:
                (d / FINAL).write_bytes(b"f" * final)
            (d / "eval" / "scores.json").write_bytes(b"s" * 100)  # files below the dir count too
            status = "running" if job == running else "succeeded"
            conn.execute(
                sa.text("UPDATE jobs SET status=:s, artifact_dir=:d WHERE id=:j"),
                {"s": status, "d": str(d), "j": job},
            )
    at = render(monkeypatch, q.url)
    total = sum(c + f + 100 for c, f in sizes.values())
    # only the succeeded job of a "final" grid has resume state to free: the "all" grid keeps its own,
    # and the running job needs its checkpoint
    assert (
        f"Disk: {fmt_bytes(total)} in 3 artifact dir(s); `looplab gc` would free {fmt_bytes(3000)}"
        in text_of(at)
    )
