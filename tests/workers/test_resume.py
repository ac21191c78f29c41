"""Exact resume: a run SIGKILLed at a random point after a checkpoint and then resumed reproduces the
uninterrupted run bit for bit (every train/val loss by step, and the final weights).

Each run is a separate `python -m looplab.workers.train` process writing its events to a JSON-lines file, so the
kill is a real `kill -9` of a process mid-training, as a crash or power loss would be.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from looplab.workers import checkpoint as ckpt
from looplab.workers.artifacts import resume_from

STEPS = 30
# every curve that must replay exactly, train-time depth curves included (fixed4 evaluates 1, 2, 4, 8)
KEYS = ("train_loss", "val_loss", "val_bpb", "lr", "val_loss@1", "val_loss@2", "val_loss@8")


def _cmd(out, events) -> list[str]:
    return [
        sys.executable,
        "-m",
        "looplab.workers.train.job",
        "--preset",
        "fixed4",
        "--size",
        "tiny",
        "--model",
        "d_model=32",
        "--model",
        "n_heads=1",
        "--model",
        "head_dim=32",
        "--seq-len",
        "32",
        "--batch-size",
        "8",
        "--tokens",
        str(STEPS * 8 * 32),
        "--ckpt-every",
        "10",
        "--eval-every",
        "15",
        "--eval-tokens",
        "512",
        "--device",
        "cpu",
        "--seed",
        "3",
        "--quiet",
        "--out",
        str(out),
        "--events-jsonl",
        str(events),
    ]


def kill_once(proc: subprocess.Popen, ready, what: str = "its first checkpoint") -> None:
    """SIGKILL `proc` at a random point (0-0.3 s) after `ready()` first holds; fails if it ends before."""
    deadline = time.monotonic() + 240
    while not ready():
        assert proc.poll() is None, f"training ended before {what}"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(random.uniform(0.0, 0.3))
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def _curves(*event_files) -> dict[str, dict[int, float]]:
    """key -> step -> value; a later file (the resumed attempt) supersedes earlier points."""
    curves: dict[str, dict[int, float]] = {}
    for f in event_files:
        for line in f.read_text().splitlines():
            e = json.loads(line)
            if e["kind"] == "metric" and e["key"] in KEYS:
                curves.setdefault(e["key"], {})[e["step"]] = e["value"]
    return curves


@pytest.mark.slow  # docs/testing.md: three training processes, one killed
def test_sigkill_then_resume_matches_uninterrupted_run_bit_for_bit(looplab_cache, tmp_path):
    ref_dir, ref_ev = tmp_path / "ref", tmp_path / "ref.jsonl"
    r = subprocess.run(
        _cmd(ref_dir, ref_ev), env=_env(), check=True, timeout=300, capture_output=True, text=True
    )
    assert "done:" in r.stdout and "final_val_loss" in r.stdout  # the standalone summary

    out, ev1, ev2 = tmp_path / "killed", tmp_path / "attempt1.jsonl", tmp_path / "attempt2.jsonl"
    proc = subprocess.Popen(_cmd(out, ev1), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_once(proc, lambda: resume_from(out) is not None)  # a random point after the first checkpoint
    killed_at = ckpt.load(resume_from(out))["trainer"]["step"]
    assert not (out / "final.pt").exists() and 10 <= killed_at < STEPS

    subprocess.run(_cmd(out, ev2), env=_env(), check=True, timeout=300, capture_output=True)
    resumed = [json.loads(x) for x in ev2.read_text().splitlines() if '"resumed"' in x]
    assert [e["step"] for e in resumed] == [killed_at]

    ref, got = _curves(ref_ev), _curves(ev1, ev2)
    assert sorted(ref["train_loss"]) == list(range(STEPS))
    for key in KEYS:
        assert got[key] == ref[key], key  # exact float equality, every step
    # the points the killed attempt reported past its checkpoint were replayed identically
    first = _curves(ev1)["train_loss"]
    assert all(first[s] == ref["train_loss"][s] for s in first)

    a, b = ckpt.load(ref_dir / "final.pt")["model"], ckpt.load(out / "final.pt")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
