"""Shared helpers for the model tests: one CPU thread (the machine is shared; tiny ops only lose to
thread overhead) and a way to give a model random non-trivial weights.

Why randomise: at init every output projection is zero, so every block is the identity and a test of
attention, windows or decoding would pass vacuously.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every model test on one torch thread (tests/conftest.py)."""


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random weights of sensible scale for every parameter (logits of order 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2 and (name.startswith("wte") or ".ve." in name):
                p.normal_(0.0, 0.3, generator=g)
            elif p.ndim == 2:
                p.normal_(0.0, p.shape[1] ** -0.5, generator=g)
            else:
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
    return model
