"""Fixtures for the workers tests: tiny specs, one thread per process, one trained model per session.

One torch thread: the test machine's few cores are shared, and oversubscribed intra-op threads make a
tiny model's step 20x slower without changing any result we assert on.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the subprocesses of the resume test

TINY_MODEL = {"d_model": 32, "n_heads": 1, "head_dim": 32}


def tiny_spec(**kw) -> dict:
    """A train spec for a model that steps in tens of milliseconds on one CPU thread."""
    d = {
        "recipe": "fixed4",
        "size": "tiny",
        "model": dict(TINY_MODEL),
        "seq_len": 32,
        "batch_size": 8,
        "tokens": 8 * 32 * 20,
        "eval_every": 1000,
        "eval_tokens": 1024,
        "ckpt_every": 1000,
        "device": "cpu",
        "data": {"corpus": "offline", "tokenizer": "byte"},
    }
    d.update(kw)
    return d


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every workers test on one torch thread (tests/conftest.py)."""


@pytest.fixture(scope="session")
def trained_fixed4(looplab_cache, tmp_path_factory):
    """A tiny fixed4 model trained long enough that 4 loops beat 1 loop; (artifact_dir, reporter)."""
    import torch

    from looplab.workers.reporter import MemoryReporter
    from looplab.workers.train import job as train

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("fixed4_run")
    rep = MemoryReporter()
    spec = train.Spec.from_dict(tiny_spec(tokens=8 * 32 * 200, eval_every=100, ckpt_every=50, log_every=5))
    train.run(spec, rep, out)
    return out, rep
