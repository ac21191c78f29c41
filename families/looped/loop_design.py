"""The loop-design parameters beyond the Parcae injection: input-injection strengths, history maps and
per-round (timestep) conditioning of the recurrent block. Formulas: `model.config`'s docstring.

Each module owns its parameters and their initialisation, so `LoopedLM` only asks it for the tensors a
round needs. What a round receives is plain tensors (no module, no round index), so a compiled round
part is traced once per round setting whatever the round index (see `LoopedLM.compile_parts`).

Parameters and their initialisation (d = d_model, R = `cfg.timestep_round_count`, n = n_recurrent):

    injection scalar    weight ()             one
    injection channel   weight (d,)           ones
    injection dense     weight (d, d)         identity
    history             weight (w, d)         zero: row k-1 is m_k, the map of lag k
    loop_gate           gate (R,)             one
    branch_gate         gate (R, n, 2)        one: [..., 0] the attention branch, [..., 1] the MLP branch
    adaln               scale, shift          zero, (R, n, 2, d) each: [..., 0, :] the attention pre-norm,
                                              [..., 1, :] the MLP pre-norm
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from looplab.model.config import ModelConfig


class InputInjection(nn.Module):
    """The "scalar" / "channel" / "dense" injections: the drive a e (or W e) added to every round's input."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        d, self.kind = cfg.d_model, cfg.injection
        shape = {"scalar": (), "channel": (d,), "dense": (d, d)}[self.kind]
        self.weight = nn.Parameter(torch.empty(shape))
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        if self.kind == "dense":
            self.weight.copy_(torch.eye(self.weight.shape[0]))
        else:
            self.weight.fill_(1.0)

    def drive(self, e: Tensor) -> Tensor:
        """e (B, T, d) -> a e or W e (B, T, d), added to every round's input."""
        if self.kind == "dense":
            return F.linear(e, self.weight)
        return self.weight.to(e.dtype) * e


class HistoryMaps(nn.Module):
    """The maps m_1..m_w of the recent state differences, channel vectors (w, d), zero at init."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(cfg.history, cfg.d_model))

    @torch.no_grad()
    def init_weights(self) -> None:
        self.weight.zero_()

    def add(self, x: Tensor, past: tuple[Tensor, ...]) -> Tensor:
        """x (B, T, d) + sum_k m_k * past[k-1]; past = (h_{t-1} - h_{t-2}, h_{t-2} - h_{t-3}, ...), newest
        first, only the differences that exist (at most w), each (B, T, d)."""
        for lag, diff in enumerate(past):
            x = x + self.weight[lag].to(diff.dtype) * diff
        return x


class LayerCondition(NamedTuple):
    """One recurrent layer's conditioning in one round; None = that part is not conditioned.
    Gates are 0-dim tensors; scales and shifts (d,)."""

    attn_gate: Tensor | None = None
    mlp_gate: Tensor | None = None
    attn_scale: Tensor | None = None
    attn_shift: Tensor | None = None
    mlp_scale: Tensor | None = None
    mlp_shift: Tensor | None = None


class TimestepConditioning(nn.Module):
    """Per-round parameters of the recurrent block for R rounds; later rounds use round R's."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.kind, self.rounds = cfg.timestep, cfg.timestep_round_count
        R, n, d = self.rounds, cfg.n_recurrent, cfg.d_model
        if self.kind == "loop_gate":
            self.gate = nn.Parameter(torch.ones(R))
        elif self.kind == "branch_gate":
            self.gate = nn.Parameter(torch.ones(R, n, 2))
        elif self.kind == "adaln":
            self.scale = nn.Parameter(torch.zeros(R, n, 2, d))
            self.shift = nn.Parameter(torch.zeros(R, n, 2, d))
        else:
            raise ValueError(f"timestep: no per-round parameters for {self.kind!r}")

    @torch.no_grad()
    def init_weights(self) -> None:
        if self.kind == "adaln":
            self.scale.zero_()
            self.shift.zero_()
        else:
            self.gate.fill_(1.0)

    def round_tensors(self, index: int) -> tuple[Tensor, ...]:
        """The parameters of round `index` (already clamped by `ModelConfig.timestep_index`), as the
        round part receives them: (g,) 0-dim for loop_gate, (gates (n, 2),) for branch_gate,
        (scale, shift) (n, 2, d) each for adaln."""
        if self.kind == "adaln":
            return self.scale[index], self.shift[index]
        return (self.gate[index],)


def layer_conditions(kind: str, tensors: tuple[Tensor, ...], n_layers: int) -> list[LayerCondition | None]:
    """Per recurrent layer, the conditioning `tensors` (from `round_tensors`) give it. loop_gate gates
    the whole round, not a layer: its layers get None, as without timestep."""
    if kind == "branch_gate":
        (gates,) = tensors  # (n, 2)
        return [LayerCondition(attn_gate=gates[j, 0], mlp_gate=gates[j, 1]) for j in range(n_layers)]
    if kind == "adaln":
        scale, shift = tensors  # (n, 2, d) each
        return [
            LayerCondition(
                attn_scale=scale[j, 0], attn_shift=shift[j, 0], mlp_scale=scale[j, 1], mlp_shift=shift[j, 1]
            )
            for j in range(n_layers)
        ]
    return [None] * n_layers
