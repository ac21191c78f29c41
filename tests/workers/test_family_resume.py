"""Exact resume for a model of another family: the example universal transformer (no randomness in its
forward, so not split-dependent) SIGKILLed after a checkpoint and resumed reproduces the uninterrupted
run bit for bit, as looplab's own model does (tests/workers/test_resume.py, whose commands it reuses)."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from looplab.workers import checkpoint as ckpt
from looplab.workers.artifacts import resume_from
from tests.workers.test_resume import KEYS, STEPS, _cmd, _curves, _env, kill_once

FAMILY = ["--family", "examples.universal_transformer:factory", "--family-config", "d_model=32"]


def _family_cmd(out, events) -> list[str]:
    return [*_cmd(out, events), *FAMILY, "--optimizer", "adamw"]


def killed_and_resumed_matches(make_cmd, tmp_path) -> dict:
    """Train with `make_cmd(out, events)` uninterrupted, then SIGKILLed after a checkpoint and resumed:
    every curve in KEYS and the final weights must be equal, bit for bit. Returns the run's family.json."""
    ref_dir, ref_ev = tmp_path / "ref", tmp_path / "ref.jsonl"
    subprocess.run(make_cmd(ref_dir, ref_ev), env=_env(), check=True, timeout=300, capture_output=True)

    out, ev1, ev2 = tmp_path / "killed", tmp_path / "attempt1.jsonl", tmp_path / "attempt2.jsonl"
    proc = subprocess.Popen(
        make_cmd(out, ev1), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    kill_once(proc, lambda: resume_from(out) is not None)
    killed_at = ckpt.load(resume_from(out))["trainer"]["step"]
    assert not (out / "final.pt").exists() and 10 <= killed_at < STEPS

    subprocess.run(make_cmd(out, ev2), env=_env(), check=True, timeout=300, capture_output=True)
    ref, got = _curves(ref_ev), _curves(ev1, ev2)
    assert sorted(ref["train_loss"]) == list(range(STEPS))
    for key in KEYS:
        assert got[key] == ref[key], key  # exact float equality, every step
    a, b = ckpt.load(ref_dir / "final.pt")["model"], ckpt.load(out / "final.pt")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return json.loads((ref_dir / "family.json").read_text())


@pytest.mark.slow  # three training processes, one killed
def test_a_family_run_killed_and_resumed_matches_the_uninterrupted_run(looplab_cache, tmp_path):
    assert killed_and_resumed_matches(_family_cmd, tmp_path)["family"].startswith("examples.")
