"""The forward's result the jobs read (`LMOutput`): what the contract's module returns for every family,
looplab's own `LoopedLM` (families/looped/model.py) and `model.contract.FamilyLM` alike. It lives here,
with neither, so a job reads it without naming a family."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class LMOutput:
    logits: Tensor  # (B, T, V) fp32
    loss: Tensor | None = None  # mean cross-entropy over targets != -1 (with a gate: its objective)
    task_loss: Tensor | None = None  # with a gate in training: the objective's task part
    expected_rounds: Tensor | None = None  # with a gate in training: the exit distribution's mean round
