"""Retention: a succeeded job's dir keeps final.pt and loses checkpoint.pt (only after the success is
recorded, never a failed job's, never the only weights, and before the follow-ups that read final.pt);
`looplab gc` dry-run and real on jobs of every state and retention; the disk `looplab plan` shows; the
checkpoint sizes the plan assumes against real ones."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from looplab.lab.planner import Calibration
from looplab.model.counts import param_count
from looplab.model.errors import ConfigError
from looplab.orchestrator import Grid, Queue, retention
from looplab.workers.artifacts import CHECKPOINT, FINAL, resume_from
from tests.cli import looplab_here
from tests.orchestrator import artifact_jobs

CAL = Calibration(device="cpu", flops_per_s=1e9, decode_layer_s=1e-4, save_bytes_per_s=1e12, startup_s=2.0)


def _dir(path, ckpt: int = 3000, final: int | None = 1000, stale: int = 0):
    path.mkdir(parents=True)
    (path / CHECKPOINT).write_bytes(b"c" * ckpt)
    if final is not None:
        (path / FINAL).write_bytes(b"f" * final)
    if stale:
        (path / f".{CHECKPOINT}.tmp123").write_bytes(b"t" * stale)
    (path / "spec.json").write_text("{}")
    return path


def test_apply_drops_only_what_a_resume_reads_and_only_once(tmp_path):
    d = _dir(tmp_path / "run", stale=500)
    assert retention.apply(d, dry_run=True) == 3500 and (d / CHECKPOINT).exists()
    assert retention.apply(d) == 3500
    assert sorted(p.name for p in d.iterdir()) == [FINAL, "spec.json"]
    assert retention.apply(d) == 0  # idempotent: a second pass (a crash, a rerun) frees nothing
    alone = _dir(tmp_path / "no-final", final=None)
    assert retention.apply(alone) == 0 and (alone / CHECKPOINT).exists()  # its only weights stay
    assert retention.apply(tmp_path / "gone") == 0 and retention.apply(None) == 0


def test_the_queue_drops_the_resume_state_after_success_and_before_follow_ups(tmp_path, ray_cluster):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=artifact_jobs)
    final = Grid("final", base={"seed": 0}, then=["depth_sweep"])  # the default retention
    keep = Grid("all", base={"seed": 1}, then=["depth_sweep"], retention="all")
    failed = Grid("failed", base={"seed": 2, "fail": True}, max_attempts=1)
    only = Grid("only-checkpoint", base={"seed": 3, "final_bytes": 0})
    ids = q.submit([final, keep, failed, only])
    q.run(until_empty=True, progress=False, poll_s=0.2)
    st = q.status().set_index("id")
    with q.eng.connect() as conn:
        dirs = dict(conn.execute(sa.text("SELECT id, artifact_dir FROM jobs")).all())
        kept = dict(conn.execute(sa.text("SELECT id, retention FROM jobs")).all())
    train_final, sweep_final, train_all, sweep_all, train_failed, train_only = ids
    assert [st.loc[j, "status"] for j in ids] == ["succeeded"] * 4 + ["failed", "succeeded"]
    assert kept[train_final] == kept[sweep_final] == "final" and kept[train_all] == "all"
    files = {
        j: {p.name for p in Path(dirs[j]).iterdir()}
        for j in (train_final, train_all, train_failed, train_only)
    }
    assert CHECKPOINT not in files[train_final] and FINAL in files[train_final]
    assert {CHECKPOINT, FINAL} <= files[train_all]
    assert CHECKPOINT in files[train_failed]  # a failed job may be retried: it resumes from it
    assert CHECKPOINT in files[train_only]  # without final.pt the checkpoint holds the only weights
    # the follow-up ran after the deletion and read the final weights
    assert "found checkpoint.pt=False final.pt=True" in "\n".join(q.logs(sweep_final)["message"])
    assert "found checkpoint.pt=True final.pt=True" in "\n".join(q.logs(sweep_all)["message"])


def _gc(capsys, q: Queue, *flags: str) -> str:
    ran = looplab_here(capsys, "--db", q.url, "gc", *flags)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout


def test_gc_dry_run_then_real_on_jobs_of_every_state(tmp_path, capsys):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=artifact_jobs)
    old, crashed, everything, failed, queued = q.submit(
        [Grid("study", base={"seed": s}) for s in range(2)]
        + [
            Grid("keep", base={"seed": 2}, retention="all"),
            Grid("study", base={"seed": 3}),
            Grid("study", base={"seed": 4}),
        ]
    )
    (other,) = q.submit(Grid("other", base={"seed": 5}))
    states = {
        old: "succeeded",
        crashed: "succeeded",
        everything: "succeeded",
        failed: "failed",
        queued: "queued",
        other: "succeeded",
    }
    art = tmp_path / "art"
    with q.eng.begin() as conn:
        for job, status in states.items():
            _dir(art / str(job), ckpt=1000 * job, stale=7 if job == crashed else 0)
            conn.execute(
                sa.text("UPDATE jobs SET status=:s, artifact_dir=:d WHERE id=:j"),
                {"s": status, "d": str(art / str(job)), "j": job},
            )
        # a job submitted before the rule existed: no retention (gc applies "final" when asked)
        conn.execute(sa.text("UPDATE jobs SET retention=NULL WHERE id=:j"), {"j": old})

    out = _gc(capsys, q, "--dry-run")
    want = {old: 1000 * old, crashed: 1000 * crashed + 7, other: 1000 * other}
    assert (
        f"would free {retention.fmt_bytes(sum(want.values()))} ({sum(want.values()):,} bytes) in 3 job(s)"
        in out
    )
    assert "1 succeeded job(s) of grids with retention 'all' left as they are" in out
    assert all((art / str(j) / CHECKPOINT).exists() for j in states)  # a dry run deletes nothing

    out = _gc(capsys, q, "--grid", "study")
    assert f"freed {retention.fmt_bytes(want[old] + want[crashed])}" in out and "in 2 job(s)" in out
    assert (
        not (art / str(old) / CHECKPOINT).exists()
        and not (art / str(crashed) / f".{CHECKPOINT}.tmp123").exists()
    )
    assert (art / str(other) / CHECKPOINT).exists()  # not of that grid
    assert "in 1 job(s)" in _gc(capsys, q)
    for job in (everything, failed, queued):  # kept by its grid, resumable, not finished
        assert (art / str(job) / CHECKPOINT).exists()
    assert all((art / str(j) / FINAL).exists() for j in states)
    assert "freed 0 B (0 bytes) in 0 job(s)" in _gc(capsys, q)  # nothing is left to free

    used = retention.disk_in_use(q.eng, list(states))
    assert used.reclaimable == 0 and used.dirs == len(states)
    assert used.total == sum(retention.dir_bytes(art / str(j)) for j in states)


def test_retention_is_checked_and_no_part_of_a_jobs_identity(tmp_path):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=artifact_jobs)
    with pytest.raises(ConfigError, match=r"grid 'g': retention: unknown 'none'; accepted: final, all"):
        q.submit(Grid("g", base={"seed": 0}, retention="none"))
    default = Grid("g", base={"seed": 0})
    assert "retention" not in default.to_dict()  # a grid of before the field hashes as it did
    assert dataclasses.replace(default, retention="all").to_dict()["retention"] == "all"
    (job,) = q.submit(default)
    assert q.submit(dataclasses.replace(default, retention="all")) == [job] and q.last_added == []
    with q.eng.connect() as conn:
        assert conn.execute(sa.text("SELECT retention FROM jobs")).scalars().all() == ["final"]


def test_plan_shows_the_disk_each_retention_keeps(tmp_path, monkeypatch):
    """A lean tiny AdamW run: checkpoint.pt holds 12 P bytes (weights and two moments), final.pt 4 P;
    "final" keeps 4 P after success, "all" 16 P; it saves once (at the end), so while it runs its
    checkpoint and final.pt are there beside the spool of its points, never `keep_checkpoints` of them."""
    monkeypatch.setenv("LOOPLAB_CACHE", str(tmp_path / "cache"))
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    spec = {
        "recipe": "lean",
        "size": "tiny",
        "batch_size": 4,
        "seq_len": 32,
        "tokens": 4 * 32 * 5,
        "seed": 0,
        "eval_every": 1000,
        "ckpt_every": 1000,
        "eval_tokens": 64,
        "eval_loops": [4],
        "optimizer": "adamw",
        "data": {"corpus": "offline", "tokenizer": "byte"},
    }
    report = q.plan(
        [Grid("f", base=spec), Grid("a", base={**spec, "seed": 1}, retention="all")],
        num_cpus=1,
        num_gpus=0,
        calibration=CAL,
    )
    final, everything = report.new_jobs()
    from looplab.orchestrator.variants import resolve

    p = param_count(resolve("train", spec).cfg)["total"]
    points = 5 * 3 + 1 * 4  # 5 logged steps of 3 metrics, one evaluation of 4
    assert final.estimate.disk.peak == pytest.approx(12 * p + 4 * p + points * 140)
    assert (final.disk_kept, everything.disk_kept) == (pytest.approx(4 * p), pytest.approx(16 * p))
    kept, most = report.disk()
    assert kept == pytest.approx(20 * p)
    # one CPU: the runs go one after the other, so at most one runs beside the other's kept files
    assert most == pytest.approx(4 * p + 16 * p + points * 140)
    text = report.text()
    assert f"disk: {retention.fmt_bytes(20 * p)} kept once every job succeeded" in text


def test_planned_checkpoint_sizes_match_a_real_run(tmp_path, looplab_cache, one_torch_thread):
    """A checkpoint and final.pt of a real (tiny) run are the sizes the plan counts, within 5 %, for
    AdamW and the default (Muon) optimizer; a spool point of a long run is ~140 bytes."""
    from looplab.orchestrator.task import MetricSpool
    from looplab.workers.reporter import Event, EventKind, MemoryReporter
    from looplab.workers.train import job as train
    from looplab.workers.train.cost import cost
    from looplab.workers.train.spec import Spec

    for optimizer in ("adamw", "parcae"):
        spec = Spec.from_dict(
            {
                "recipe": "lean",
                "size": "tiny",
                "model": {"d_model": 64, "n_heads": 1, "head_dim": 64},
                "seq_len": 32,
                "batch_size": 4,
                "tokens": 4 * 32 * 3,
                "eval_every": 1000,
                "eval_tokens": 128,
                "ckpt_every": 1000,
                "device": "cpu",
                "optimizer": optimizer,
                "data": {"corpus": "offline", "tokenizer": "byte"},
            }
        )
        run = tmp_path / optimizer
        train.run(spec, MemoryReporter(), run)
        planned = cost(spec)
        assert resume_from(run).stat().st_size == pytest.approx(planned.checkpoint_bytes, rel=0.05)
        assert (run / FINAL).stat().st_size == pytest.approx(planned.final_bytes, rel=0.05)

    spool = MetricSpool(tmp_path)
    for key in ("train_loss", "lr", "tokens_per_s", "val_loss@8"):
        point = {
            "key": key,
            "step": 123_456,
            "value": 3.14159265358979,
            "tokens": 4_046_848_000,
            "wall_s": 54_321.123456789,
        }
        spool.append(Event(EventKind.METRIC, 1.764e9 + 0.123456, point))
    spool.close()
    assert (tmp_path / MetricSpool.NAME).stat().st_size / 4 == pytest.approx(140, rel=0.15)
    assert json.loads((tmp_path / MetricSpool.NAME).read_text().splitlines()[0])["step"] == 123_456
