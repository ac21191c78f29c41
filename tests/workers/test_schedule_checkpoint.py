"""LR schedule ends at exactly zero; checkpoint writes are atomic and corrupt files are named, not deleted."""

from __future__ import annotations

import hashlib
import os

import pytest
import torch

from model.errors import ConfigError
from workers import checkpoint as ckpt
from workers.optim import lr_factor


@pytest.mark.parametrize("frac", [0.01, 0.2, 0.5, 1.0])
def test_lr_reaches_zero_exactly_on_the_last_step(frac):
    for total in [1, 2, 3, 5, 7, 10, 33, 100, 101, 999, 12345]:
        f = [lr_factor(s, total, warmup_steps=0, cooldown_frac=frac) for s in range(total)]
        assert f[-1] == 0.0, (total, frac)
        assert all(0.0 <= x <= 1.0 for x in f)
        assert all(a >= b for a, b in zip(f, f[1:]))  # never rises without warmup
        if total >= 4 and frac <= 0.5:
            assert f[0] == 1.0


def test_warmup_then_constant_then_cooldown():
    f = [lr_factor(s, 100, warmup_steps=10, cooldown_frac=0.5) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == 1.0 and f[49] == 1.0 and f[50] == 1.0
    assert f[75] == pytest.approx(24 / 49) and f[99] == 0.0


def _state(v: float) -> dict:
    return {"model": {"w": torch.full((3,), v)}, "model_config": {"d_model": 8}, "step": int(v)}


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


def _time_trainer(total: int, frac: float):
    from types import SimpleNamespace

    from workers.trainer import Trainer

    t = Trainer.__new__(Trainer)
    t.spec = SimpleNamespace(time_s=10.0, warmup_steps=0, cooldown_frac=frac)
    t.total_steps, t.in_cooldown, t.cool_f = total, False, 1.0
    return t


@pytest.mark.parametrize("total,frac", [(10, 0.5), (37, 0.2), (100, 1.0), (2, 0.5)])
def test_time_budget_cooldown_equals_fixed_schedule_when_plan_holds(total, frac):
    t = _time_trainer(total, frac)
    got = [t._factor(s) for s in range(total)]
    want = [lr_factor(s, total, 0, frac) for s in range(total)]
    assert got == pytest.approx(want, abs=1e-12) and got[-1] == 0.0


def test_time_budget_cooldown_follows_a_moving_end_to_zero():
    t = _time_trainer(20, 0.5)
    f = []
    for s in range(40):
        t.total_steps = 20 + s // 3 if s < 30 else 30  # the plan keeps growing, then settles
        if s >= t.total_steps:
            break
        f.append(t._factor(s))
    assert f[-1] == 0.0 and all(a >= b for a, b in zip(f, f[1:])) and len(f) == 29
