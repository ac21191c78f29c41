"""Shared helpers for the model tests: one CPU thread (the machine is shared; tiny ops only lose to
thread overhead), a way to give a model random non-trivial weights, and the states a forward passes
through (`forward_states`).

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


def forward_states(model, idx: torch.Tensor, through=None, **forward_kwargs) -> torch.Tensor:
    """The states `model`'s forward passes through -> (n_rounds + 1, B, T, d): the initial state, then
    the state after every global round (a held sample's state included), watched in the model's round
    loop while `through(idx, **forward_kwargs)` runs (`through`: the model, or its `CompiledLM`). The
    independent reading of what `LoopedLM.round_states` returns, through the forward's own parts."""
    seen: list[torch.Tensor] = []
    loop = type(model)._loop

    def watched(h, counts, one_round, observe=None):
        seen.append(h)
        return loop(model, h, counts, one_round, seen.append)

    model._loop = watched  # this instance only
    try:
        (model if through is None else through)(idx, **forward_kwargs)
    finally:
        del model._loop
    return torch.stack(seen)
