"""What the kinds' cost functions return for a job made of forward passes without autograd (a depth
sweep, an eval, a decode benchmark): its FLOPs, its peak memory per device type, and what a time model
needs besides (the width whose forward rate applies; a decode benchmark's step count, the layer
applications of one step, each of which pays a fixed cost, and per cell its steps with the FLOPs and the
bytes each reads, which bound a step on a GPU by compute or by memory bandwidth). A train job has its own (workers/train/cost.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ForwardCost:
    flops: float  # forward FLOPs of every pass the job runs
    memory: dict[str, float]  # device type ("cpu", "cuda") -> peak bytes
    d_model: int
    decode_steps: int = 0
    applications: int = 0  # layer applications per decode step
    # device type -> per decode cell (steps, FLOPs per step, bytes read and written per step)
    cells: dict[str, tuple[tuple[int, float, float], ...]] = field(default_factory=dict)
