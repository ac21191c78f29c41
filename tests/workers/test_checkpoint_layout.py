"""Checkpoints by attempt and step (workers/artifacts.py): the last `keep_checkpoints` kept, a late write
of a replaced attempt never resumed from, the old one-file layout still resumed, `looplab gc` knowing
both layouts."""

from __future__ import annotations

import shutil

import pytest

from looplab.model.errors import ConfigError
from looplab.orchestrator import retention
from looplab.workers import artifacts, jobs
from looplab.workers import checkpoint as ckpt
from looplab.workers.artifacts import CHECKPOINT, FINAL, checkpoint_name, resume_from
from looplab.workers.reporter import MemoryReporter
from looplab.workers.train import job as train
from tests.workers.conftest import tiny_spec


def touch(d, attempt: int, step: int):
    path = d / checkpoint_name(attempt, step)
    path.write_bytes(b"c")
    return path


def test_a_late_write_of_a_replaced_attempt_is_never_usable_and_is_removed(tmp_path):
    artifacts.start_attempt(tmp_path, 1)
    touch(tmp_path, 1, 10)
    kept = touch(tmp_path, 1, 20)
    artifacts.start_attempt(tmp_path, 2)  # attempt 2 takes over: it found steps 10 and 20
    late = touch(tmp_path, 1, 30)  # attempt 1, cut off from the database, goes on writing
    assert resume_from(tmp_path) == kept
    mine = touch(tmp_path, 2, 30)
    assert resume_from(tmp_path) == mine
    artifacts.start_attempt(tmp_path, 3)  # a later attempt finds the late file too: still fenced
    assert late not in [c.path for c in artifacts.usable(tmp_path)]
    assert resume_from(tmp_path) == mine and resume_from(tmp_path, before_step=30) == kept
    assert late in artifacts.removable(tmp_path, keep=2)
    assert artifacts.removable(tmp_path, keep=2) == sorted([late, tmp_path / checkpoint_name(1, 10)])
    # the rule can fail: without the record of attempt 2, the late write would win
    mine.unlink()
    shutil.rmtree(tmp_path / artifacts.ATTEMPTS)
    assert resume_from(tmp_path) == late


def test_the_names_order_by_step_and_the_old_layout_gives_way(tmp_path):
    assert checkpoint_name(3, 120) == "checkpoint-a0003-s00000120.pt"
    with pytest.raises(ValueError, match="attempt and step"):
        checkpoint_name(-1, 0)
    legacy = tmp_path / CHECKPOINT
    legacy.write_bytes(b"old")
    assert resume_from(tmp_path) == legacy and artifacts.removable(tmp_path, keep=2) == []
    assert resume_from(tmp_path, before_step=5) is None  # the old file says no step in its name
    new = touch(tmp_path, 1, 5)
    assert resume_from(tmp_path) == new and artifacts.removable(tmp_path, keep=2) == [legacy]
    assert artifacts.next_attempt(tmp_path) == 2
    # gc of a finished run: every checkpoint of both layouts and killed writes, never final.pt
    (tmp_path / ".checkpoint-a0001-s00000006.pt.tmp99").write_bytes(b"t")
    assert retention.apply(tmp_path, dry_run=True) == 1  # no final.pt: the checkpoints are the weights
    (tmp_path / FINAL).write_bytes(b"f")
    assert {p.name for p in artifacts.resume_only(tmp_path)} == {
        CHECKPOINT,
        new.name,
        ".checkpoint-a0001-s00000006.pt.tmp99",
    }
    assert retention.apply(tmp_path) == 3 + 1 + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [FINAL]


def test_keep_checkpoints_is_at_least_two():
    with pytest.raises(ConfigError, match="keep_checkpoints: must be >= 2, got 1"):
        train.Spec.from_dict(tiny_spec(keep_checkpoints=1))


def test_planned_disk_counts_the_checkpoints_kept():
    one_save = retention.PlannedDisk(10.0, 4.0, 1.0, saves=1, keep=3)
    many = retention.PlannedDisk(10.0, 4.0, 1.0, saves=9, keep=3)
    assert (one_save.peak, one_save.kept("all"), one_save.kept("final")) == (15.0, 14.0, 4.0)
    assert (many.peak, many.kept("all")) == (4 * 10.0 + 4.0 + 1.0, 3 * 10.0 + 4.0)


class StopAt(MemoryReporter):
    def __init__(self, steps: int, attempt: int | None = None) -> None:
        super().__init__()
        self.steps, self.attempt = steps, attempt

    def should_stop(self) -> bool:
        return len(self.curve("train_loss")) >= self.steps


SPEC = dict(tokens=8 * 32 * 12, ckpt_every=2, keep_checkpoints=3)


def test_a_run_keeps_its_last_checkpoints_and_a_takeover_ignores_the_replaced_attempts_late_write(
    looplab_cache, tmp_path
):
    spec = train.Spec.from_dict(tiny_spec(**SPEC))
    whole = MemoryReporter()
    train.run(spec, whole, tmp_path / "whole")
    names = sorted(p.name for p in (tmp_path / "whole").glob("checkpoint-*"))
    assert names == [checkpoint_name(1, s) for s in (8, 10, 12)]  # the last 3 of every 2 steps, and 12

    run, ahead = tmp_path / "run", tmp_path / "ahead"
    with pytest.raises(jobs.JobInterrupted):
        train.run(spec, StopAt(4, attempt=1), run)  # attempt 1 checkpoints at step 4 and is replaced
    with pytest.raises(jobs.JobInterrupted):
        train.run(spec, StopAt(8, attempt=1), ahead)  # what attempt 1 would write later: step 8
    artifacts.start_attempt(run, 2)  # attempt 2 starts (the driver claimed the job again)
    late = run / checkpoint_name(1, 8)
    shutil.copy(resume_from(ahead), late)  # attempt 1's late write, after the takeover
    rep = MemoryReporter()
    rep.attempt = 2
    train.run(spec, rep, run)
    assert rep.of("resumed") == [{"step": 4}]  # not 8: the late write is fenced out
    assert rep.curve("train_loss") == whole.curve("train_loss")[4:]
    assert not late.exists()  # removed with the older ones once attempt 2 saved
    assert sorted(p.name for p in run.glob("checkpoint-*")) == [checkpoint_name(2, s) for s in (8, 10, 12)]
    assert ckpt.load(resume_from(run))["attempt"] == 2  # the token is in the file too, not only its name
    # under the queue the final weights are the attempt's own until the driver records its success
    assert not (run / FINAL).exists() and ckpt.load(run / artifacts.final_name(2))["attempt"] == 2
    assert artifacts.promote(run, 2) and ckpt.load(run / FINAL)["attempt"] == 2
    assert ckpt.load(tmp_path / "whole" / FINAL)["attempt"] == 1  # outside the queue: its own at once


def test_a_dir_of_the_old_one_file_layout_resumes_bit_for_bit(looplab_cache, tmp_path):
    spec = train.Spec.from_dict(tiny_spec(**SPEC))
    whole = MemoryReporter()
    train.run(spec, whole, tmp_path / "whole")
    old = tmp_path / "old"
    with pytest.raises(jobs.JobInterrupted):
        train.run(spec, StopAt(5), old)
    newest = resume_from(old)
    saved = ckpt.load(newest)
    del saved["spec"]["keep_checkpoints"]  # as the trainer before checkpoints by attempt wrote it
    ckpt.save(old / CHECKPOINT, saved)
    for p in old.glob("checkpoint-*"):
        p.unlink()
    shutil.rmtree(old / artifacts.ATTEMPTS)
    assert sorted(p.name for p in old.glob("*.pt")) == [CHECKPOINT]  # the old layout, as stored
    rep = MemoryReporter()
    train.run(spec, rep, old)
    assert rep.of("resumed") == [{"step": 5}]
    assert rep.curve("train_loss") == whole.curve("train_loss")[5:]
    assert not (old / CHECKPOINT).exists() and (old / FINAL).exists()
    assert len(list(old.glob("checkpoint-a0001-*"))) == 3
