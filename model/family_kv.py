"""A helper for families' exit paths (the contract's `run_rounds` with a keep mask): the keys and
values each token offers later rounds at each layer, which are its last computed round's. A family's
attention hands it every round's (K, V) of a layer and attends to what it returns."""

from __future__ import annotations

import torch
from torch import Tensor


class LastKV:
    """The last computed keys and values per layer slot: `running` (B, 1, T, 1) bool marks the tokens
    computing the current round (against keys (B, H, T, D)); the others offer their held entries."""

    def __init__(self) -> None:
        self.running: Tensor | None = None
        self.last: dict[int, tuple[Tensor, Tensor]] = {}  # layer slot -> (K, V) (B, H, T, D)

    def attend(self, slot: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        last = self.last.get(slot)
        if last is not None and self.running is not None:
            k, v = torch.where(self.running, k, last[0]), torch.where(self.running, v, last[1])
        self.last[slot] = (k, v)
        return k, v
