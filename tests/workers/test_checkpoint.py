"""Checkpoint writes are atomic, corrupt files are named and left in place, RNG states round-trip, and
a full disk is a clear error that keeps the previous checkpoint."""

from __future__ import annotations

import errno
import hashlib
import os
import traceback

import pytest
import torch

from looplab.model.errors import ConfigError
from looplab.workers import artifacts, jobs
from looplab.workers import checkpoint as ckpt
from looplab.workers.reporter import MemoryReporter
from tests.workers.conftest import tiny_spec

# what torch.save's zip writer raises when the file system fills up mid-write
SHORT_WRITE = "[enforce fail at inline_container.cc:672] . unexpected pos 4160 vs 4054"


def _state(v: float, n: int = 3) -> dict:
    return {"model": {"w": torch.full((n,), v)}, "model_config": {"d_model": 8}, "step": int(v)}


def test_interrupted_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "checkpoint.pt"
    ckpt.save(path, _state(1.0))

    def crash(*a, **k):
        raise OSError("simulated crash between write and rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        ckpt.save(path, _state(2.0))
    monkeypatch.undo()
    state = ckpt.load(path)
    assert state["step"] == 1 and torch.equal(state["model"]["w"], torch.full((3,), 1.0))
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temp file left behind


def test_rng_state_round_trips_through_weights_only(tmp_path):
    import random

    torch.manual_seed(5)
    random.seed(5)
    s = ckpt.rng_state()
    a = (torch.rand(3), random.random())
    ckpt.save(tmp_path / "c.pt", {**_state(0.0), "rng": s})
    ckpt.set_rng_state(ckpt.load(tmp_path / "c.pt")["rng"])
    b = (torch.rand(3), random.random())
    assert torch.equal(a[0], b[0]) and a[1] == b[1]


def test_corrupt_checkpoint_is_named_and_left_in_place(tmp_path):
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(b"not a checkpoint at all" * 10)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(ConfigError, match="checkpoint.pt"):
        ckpt.load(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_state_nbytes_counts_each_storage_once():
    w = torch.zeros(256)  # 1 KiB
    state = {"model": {"w": w, "view": w[:10]}, "opt": [torch.zeros(4, dtype=torch.float64)], "step": 3}
    assert ckpt.state_nbytes(state) == 1024 + 32


def _short_write(obj, f, *args, **kwargs):
    f.write(b"PK\x03\x04 partial")
    raise RuntimeError(SHORT_WRITE)


def _enospc(obj, f, *args, **kwargs):
    f.write(b"PK\x03\x04 partial")
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("writer", [_short_write, _enospc])
def test_full_disk_says_so_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, writer):
    path = tmp_path / "checkpoint.pt"
    ckpt.save(path, _state(1.0))
    monkeypatch.setattr(torch, "save", writer)
    with pytest.raises(ckpt.NoSpaceError) as e:
        ckpt.save(path, _state(2.0, n=2**18))  # 1 MiB of float32
    monkeypatch.undo()
    msg = str(e.value)
    assert msg.startswith(f"no space left writing the checkpoint at {path}: it needs ~1.0 MB, "), msg
    assert msg.endswith(" MB are free (free space or use another artifact dir)"), msg
    assert ckpt.load(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # the partial temp file is gone


def test_other_write_errors_pass_through_unchanged(tmp_path, monkeypatch):
    def broken(obj, f, *args, **kwargs):
        raise RuntimeError("something else")

    monkeypatch.setattr(torch, "save", broken)
    with pytest.raises(RuntimeError, match="^something else$"):
        ckpt.save(tmp_path / "checkpoint.pt", _state(1.0))
    assert list(tmp_path.iterdir()) == []


def test_a_train_job_on_a_full_disk_fails_with_that_message(looplab_cache, tmp_path, monkeypatch):
    """Through `workers.jobs.run`, as the queue runs a job: the message is in the exception's text
    (the queue records the traceback as the attempt's error), and the step-2 checkpoint still loads."""
    real_save, calls = torch.save, []

    def full_after_first(obj, f, *args, **kwargs):
        calls.append(1)
        return real_save(obj, f, *args, **kwargs) if len(calls) == 1 else _short_write(obj, f)

    monkeypatch.setattr(torch, "save", full_after_first)
    spec = tiny_spec(tokens=8 * 32 * 4, ckpt_every=2, eval_loops=[4])
    with pytest.raises(ckpt.NoSpaceError) as e:
        jobs.run("train", spec, MemoryReporter(), tmp_path)
    monkeypatch.undo()
    recorded = "".join(traceback.format_exception(e.value))
    at_4 = tmp_path / artifacts.checkpoint_name(1, 4)
    assert f"no space left writing the checkpoint at {at_4}: it needs ~" in recorded
    assert not at_4.exists() and artifacts.temp_files(tmp_path) == []
    assert ckpt.load(artifacts.resume_from(tmp_path))["trainer"]["step"] == 2
