"""Parts a family may share (families import looplab.model, torch and the standard library only):
`LastKV`, for an exit path (the contract's `run_rounds` with a keep mask), the keys and values each
token offers later rounds at each layer, which are its last computed round's; `RMSNorm`; and RoPE on
half-split channels (`rope_tables`, `rotate`), as Llama-style public code lays it out; and
`CachedDecode`, the contract's prefill and decode_step over a family's one cached pass; and for a
published layout, `published_values` (a config.json's fields checked and completed) and
`checked_state` (its weights as ours); `check_tensors`, a state dict that fills a model's exactly (a
looplab export's, a mapped Parcae checkpoint's)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from looplab.model.errors import ConfigError


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


class RMSNorm(nn.Module):
    """x / rms(x) in float32, times a learned scale (the Llama-style order: scale after the cast back)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        y = x.float()
        return self.weight * (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


def rope_tables(positions: Tensor, head_dim: int, base: float, dtype) -> tuple[Tensor, Tensor]:
    """cos, sin (S, head_dim) of `positions` (S,), frequencies repeated over the two channel halves."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(positions.float().cpu(), inv).to(positions.device)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, H, S, D) rotated on half-split channels (i, i + D/2); cos, sin (S, D) of `rope_tables`."""
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], dim=-1) * sin


class CachedDecode:
    """The contract's `prefill(idx, cache)` (a prompt from position 0 -> (B, T, V)) and `decode_step(tokens,
    cache)` (tokens (B,) at the cache's position -> (B, V)) for a module whose `_cached(idx, cache)`
    runs idx (B, S) from `cache.pos` through the cache, advances `cache.pos` by S and returns logits."""

    @torch.no_grad()
    def prefill(self, idx: Tensor, cache) -> Tensor:
        cache.pos = 0
        return self._cached(idx, cache)

    @torch.no_grad()
    def decode_step(self, tokens: Tensor, cache) -> Tensor:
        return self._cached(tokens.view(-1, 1), cache)[:, 0]


def published_values(
    raw: dict[str, Any], model_type: str, required: tuple[tuple[str, Any], ...], defaults: dict[str, Any]
) -> dict[str, Any]:
    """A published config.json's fields a layout reads: `raw` must say `model_type`, every (field,
    accepted value) of `required` present in it must hold that value, and each of `defaults`' fields
    it leaves out takes the default. ValueError naming the field and what is accepted."""
    if raw.get("model_type") != model_type:
        raise ValueError(f"config.model_type: expected {model_type!r}; got {raw.get('model_type')!r}")
    for key, accepted in required:
        if key in raw and raw[key] != accepted:
            raise ValueError(
                f"config.{key}: {raw[key]!r} is not computed by this family; accepted: {accepted!r}"
            )
    return {**defaults, **{k: raw[k] for k in defaults if k in raw}}


def checked_state(named, want: dict[str, Tensor], tied: tuple[str, str] | None = None) -> dict[str, Tensor]:
    """A published layout's state dict as ours: `named` yields (published name, our name, tensor), each
    checked against `want` (our module's state dict); `tied` (head, embedding) stores the embedding as
    the head too. ValueError naming the unexpected or missing tensor, or the one whose shape differs."""
    out: dict[str, Tensor] = {}
    for name, ours, tensor in named:
        if ours not in want:
            raise ValueError(f"weights: unexpected tensor {name!r} (no {ours!r} in this configuration)")
        if tuple(tensor.shape) != tuple(want[ours].shape):
            raise ValueError(
                f"weights: {name!r} has shape {tuple(tensor.shape)}; expected {tuple(want[ours].shape)}"
            )
        out[ours] = tensor
    if tied:
        out[tied[0]] = out.get(tied[1])
    missing = sorted(k for k in want if out.get(k) is None)
    if missing:
        raise ValueError(f"weights: missing tensor(s) {', '.join(missing)} in the published layout")
    return out


def check_tensors(got: dict[str, Tensor], want: dict[str, Tensor], name=lambda key: key) -> None:
    """`got` fills exactly the tensors of `want` (a model's state dict) with their shapes; else ConfigError
    naming the tensor(s) as the file calls them (`name(our key)`): unexpected, missing, or both shapes."""
    unexpected = sorted(set(got) - set(want))
    if unexpected:
        raise ConfigError(f"weights: unexpected tensor(s) {', '.join(map(name, unexpected))}")
    missing = [key for key in want if key not in got]
    if missing:
        raise ConfigError(f"weights: missing tensor(s) {', '.join(map(name, missing))}")
    for key, value in got.items():
        if tuple(value.shape) != tuple(want[key].shape):
            raise ConfigError(
                f"weights: {name(key)} has shape {tuple(value.shape)}; its config makes it {tuple(want[key].shape)}"
            )
