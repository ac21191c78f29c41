"""The live progress line (`looplab run`, lab/display.py `print_progress`) of a depth sweep has an eta
and a figure, as a train job's has: the sweep reports no curve, so its figure is the val loss at the
deepest loop count evaluated so far (orchestrator/frames.py `job_listing`). On SQLite and PostgreSQL."""

from __future__ import annotations

from looplab.lab.display import print_progress, status_frame
from looplab.orchestrator.db import engine, session
from looplab.orchestrator.schema import DepthEval, Job, LatestMetric


def _job(id_: int, kind: str, **kw) -> Job:
    return Job(
        id=id_, kind=kind, config="{}", config_hash=f"h{id_}", created_at=100.0, status="running", **kw
    )


def test_a_depth_sweep_line_has_an_eta_and_its_loss_so_far(migrated_db_url, capsys):
    eng = engine(migrated_db_url)
    with session(eng) as s:
        s.add_all(
            [
                _job(1, "train", recipe="lean", seed=0, progress_done=50, progress_total=100, eta_s=30.0),
                _job(2, "depth_sweep", progress_done=6, progress_total=12, eta_s=95.0),
                _job(3, "depth_sweep", progress_done=0, progress_total=12),  # nothing evaluated yet
            ]
        )
        s.flush()
        s.add(LatestMetric(job_id=1, key="train_loss", step=50, value=2.5))
        s.add_all([DepthEval(job_id=2, loops=1, val_loss=3.5), DepthEval(job_id=2, loops=4, val_loss=3.1)])
    print_progress(eng, [1, 2, 3])
    lines = capsys.readouterr().out.splitlines()
    train, sweep, fresh = lines
    assert "eta  0m30s" in train and train.endswith("loss 2.500")
    assert "eta  1m35s" in sweep and sweep.endswith("val 3.100")  # loops 4, the deepest so far
    assert fresh.endswith("loss ")  # no figure yet: none made up
    assert status_frame(eng, job_ids=[2])["val_loss"].tolist() == [3.1]  # `looplab status` shows it too
