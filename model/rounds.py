"""Which samples advance, and which carry gradient, in each round of a batch: decided on the host.

A batch whose sequences have different loop counts c_b runs n = max(c_b) global rounds; a sample is
held still (its state is copied through) in the rounds outside its own. With truncated backprop
(k = grad_rounds) a sample gets gradient through its own last min(c_b, k) rounds only, and a global
round runs with autograd only if some sample needs it there. Two schedules compute the same function
and the same gradients:

- *aligned* (the reference's): sample b runs in global rounds n - c_b .. n - 1 and holds h0 before, so
  every sample's last min(c_b, k) rounds fall in the last k global rounds: at most k rounds carry
  autograd, the rest run under no_grad for the whole batch. Valid only when every round is alike
  (`cfg.rounds_alike`: one round setting and no per-round timestep parameters, e.g. every parcae
  recipe): sample b's j-th round runs at global round n - c_b + j, so it must not depend on the index.
- *staggered*: sample b runs in global rounds 0 .. c_b - 1, so global round r is every sample's r-th
  round and runs round r's settings; needed when rounds differ (windows, widths, reuse_kv, MLP-only).
  The gradient windows are staggered, so up to n rounds carry autograd.

A training step may run its rows in several forwards (micro-batches, maybe on several ranks):
`forward_sizes` says how many forwards and how many rows each, the one rule that the trainer's split
(workers/train/batching.py) and the FLOP model's expectation (model/flops.py) both read.

Everything here is Python: the loop asks `grad[g]` without touching the device, and the masks go to
the device once per forward (`device_masks`). Reading counts from a device tensor needs one host
sync: pass a list or a CPU tensor (the trainer passes the sampler's CPU tensor).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from looplab.model import fields


def loop_counts(loops, batch: int) -> int | list[int]:
    """An int for the whole batch, or per-sequence counts as a list (one per row). `loops` is an int,
    a list/tuple of ints or a tensor of B counts; equal counts collapse to one int."""
    if isinstance(loops, Tensor):
        loops = loops.reshape(-1).tolist()  # on the host already for a CPU tensor; one sync for a device one
    if isinstance(loops, list | tuple):
        counts = [fields.integer("loops", c, lo=1) for c in loops]
        if len(counts) != batch:
            raise ValueError(f"loops: expected {batch} per-sequence counts (one per row), got {len(counts)}")
        return counts[0] if len(set(counts)) == 1 else counts
    return fields.integer("loops", loops, lo=1)


@dataclass(frozen=True)
class RoundPlan:
    """The schedule of one forward. Per global round g: `grad[g]` runs it with autograd; with mixed
    counts `active[g][b]` (sample b advances) and `need[g][b]` (sample b gets gradient through it)."""

    n_rounds: int
    grad: tuple[bool, ...]
    active: tuple[tuple[bool, ...], ...] | None = None  # None: every sample runs every round
    need: tuple[tuple[bool, ...], ...] | None = None

    @property
    def all_active(self) -> tuple[bool, ...]:
        return tuple(all(row) for row in self.active) if self.active else (True,) * self.n_rounds

    @property
    def need_is_active(self) -> tuple[bool, ...]:
        """Rounds where the gradient mask adds nothing to the activity mask."""
        if self.active is None:
            return (True,) * self.n_rounds
        return tuple(a == n for a, n in zip(self.active, self.need))

    def device_masks(self, device) -> tuple[Tensor | None, Tensor | None]:
        """(active, need) as (n_rounds, B, 1, 1) bool tensors on `device`, copied once without waiting
        for the device (pinned memory, non-blocking); (None, None) when every sample runs every round."""
        if self.active is None:
            return None, None
        both = torch.tensor([self.active, self.need], dtype=torch.bool)  # (2, n_rounds, B)
        if torch.device(device).type == "cuda":
            both = both.pin_memory()
        both = both.to(device, non_blocking=True)[..., None, None]
        return both[0], both[1]


def plan_rounds(
    counts: int | list[int], grad_rounds: int | None, grad_enabled: bool, rounds_share_settings: bool
) -> RoundPlan:
    """The schedule for `counts` (from `loop_counts`): aligned when `rounds_share_settings`, else
    staggered (see the module docstring). `grad_rounds` None = gradient through every round."""
    k = grad_rounds
    if isinstance(counts, int):
        n = counts
        return RoundPlan(n, tuple(grad_enabled and (k is None or r >= n - k) for r in range(n)))
    n = max(counts)
    if rounds_share_settings:
        starts = [n - c for c in counts]
        active = tuple(tuple(g >= s for s in starts) for g in range(n))
        in_window = [k is None or g >= n - k for g in range(n)]  # the same window for every sample
        need = tuple(tuple(a and in_window[g] for a in active[g]) for g in range(n))
    else:
        active = tuple(tuple(r < c for c in counts) for r in range(n))
        need = tuple(tuple(r < c and (k is None or r >= c - k) for c in counts) for r in range(n))
    grad = tuple(grad_enabled and any(row) for row in need)
    return RoundPlan(n, grad, active, need)


def forward_sizes(batch: int, micro_batch_size: int | None, ranks: int = 1) -> list[int]:
    """The rows of each forward of one training step of `batch` rows over `ranks` ranks, largest
    first: every rank runs M = ceil(batch / ranks / m) forwards (m = micro_batch_size; None: one
    forward of a rank's whole share), so the ranks step in lockstep, and the batch is cut into
    ranks x M forwards whose sizes differ by at most one (each at most m). Several ranks need a batch
    they divide (every rank then holds batch / ranks rows)."""
    batch = fields.integer("batch_size", batch, lo=1)
    ranks = fields.integer("ranks", ranks, lo=1)
    if batch % ranks:
        raise ValueError(f"batch_size: {batch} rows cannot be shared evenly by {ranks} ranks")
    share = batch // ranks
    m = share if micro_batch_size is None else fields.integer("micro_batch_size", micro_batch_size, lo=1)
    n = ranks * -(-share // m)
    return [batch // n + (i < batch % n) for i in range(n)]
