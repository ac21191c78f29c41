"""Initial values: the parameter initialisation of the public Parcae code, and the initial state h0.

Parameter by parameter (d = d_model, std_d = sqrt(2 / (5 d)), "small init"; the reference's
`scaled-zero` strategy with `init_orthogonal=True`, Parcae-small-140m):

    q, k, v, MLP fc (in)    scaled orthogonal, every entry of RMS std_d          (`scaled_orthogonal_`)
    o, MLP proj (out)       zero: every block starts as the identity
    readout C (d x d)       scaled orthogonal, entry RMS std_d (so C = sqrt(2/5) x an orthogonal matrix)
    token embedding (V x d) scaled orthogonal, entry RMS std_d; tied with the head
    untied head (if any)    as the token embedding
    value-embedding tables  N(0, 1): PyTorch's default for nn.Embedding (the reference does not re-init)
    value-embedding gates   PyTorch's default for nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in 32
    injection A_log         zero (A = 1)
    injection dt_bias       softplus^-1(-log(init_decay)): exp(-dt A) = init_decay = sqrt(1/5) at init
    injection B             identity
    RMSNorm weights         one (block norms, prelude-output norm, final norm)
    loop-design parameters  scalar/channel/dense injection one/ones/identity, history maps zero,
                            timestep gates one, adaLN scale and shift zero (`families.looped.loop_design`)
    h0 (per forward)        truncated normal on [-3 std, 3 std], std = cfg.initial_state_std = std_d
                            (training: a function of (seed, step, global row, position, channel),
                            see `RowKey`; evaluation and decoding: of (seed, position, channel))

"Scaled orthogonal" as the reference does it: draw a standard normal truncated to [-2, 2] (PyTorch's
`trunc_normal_` default bounds), take Q of its QR decomposition with the signs of R's diagonal (a
uniformly random orthogonal matrix), scale by std * sqrt(max(rows, cols)). A (semi-)orthogonal matrix
has entry RMS 1/sqrt(max(rows, cols)), so the result has entry RMS exactly `std`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

_M32 = 0xFFFFFFFF


def small_init_std(d_model: int) -> float:
    """sqrt(2 / (5 d)): the reference's std for every matrix, the embedding and h0 (0.0228 at 768)."""
    return math.sqrt(2.0 / (5.0 * d_model))


@torch.no_grad()
def scaled_orthogonal_(weight: Tensor, std: float) -> Tensor:
    """In place: a random (semi-)orthogonal matrix with entry RMS `std` (see the module docstring)."""
    if weight.is_meta:  # shapes only (parameter counting): nothing to draw
        return weight
    rows, cols = weight.shape
    draw = torch.empty(rows, cols, dtype=torch.float32, device=weight.device)
    torch.nn.init.trunc_normal_(draw, mean=0.0, std=1.0, a=-2.0, b=2.0)
    tall = draw if rows >= cols else draw.t()  # QR of the tall orientation: Q has orthonormal columns
    q, r = torch.linalg.qr(tall)
    q = q * torch.sign(torch.diagonal(r))[None, :]  # sign fix: Q uniformly distributed (Mezzadri 2007)
    q = q if rows >= cols else q.t()
    weight.copy_(q * (std * math.sqrt(max(rows, cols))))
    return weight


@torch.no_grad()
def torch_default_linear_(weight: Tensor) -> Tensor:
    """PyTorch's nn.Linear default: kaiming_uniform(a=sqrt 5) = U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    return torch.nn.init.kaiming_uniform_(weight, a=math.sqrt(5.0))


# ---- the initial state h0 ------------------------------------------------------------------------


def _mix32(x: Tensor) -> Tensor:
    """A 32-bit integer hash (int64 tensors holding 32-bit values; products stay below 2**63)."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _M32
    x = ((x >> 16) ^ x) * 0x45D9F3B & _M32
    return (x >> 16) ^ x


def _trunc_normal_from_uniform(u: Tensor, std: float) -> Tensor:
    """Inverse-CDF normal truncated to [-3 std, 3 std] (the reference's h0 bounds) from uniforms in
    (0, 1). No host sync, unlike nn.init.trunc_normal_ (which calls .item() and breaks compile graphs)."""
    lo = 0.5 * (1.0 + math.erf(-3.0 / math.sqrt(2.0)))  # Phi(-3)
    p = lo + u * (1.0 - 2.0 * lo)
    return torch.erfinv(2.0 * p - 1.0) * (math.sqrt(2.0) * std)


def h0_from_seed(seed: int, positions: Tensor, d: int, std: float) -> Tensor:
    """Deterministic truncated-normal (+-3 std) initial state, (T, d), a pure function of
    (seed, position, channel). positions: (T,) int64 on the target device."""
    s = (seed * 0x9E3779B9 + 0x7F4A7C15) & _M32
    channels = torch.arange(d, device=positions.device)
    key = (positions[:, None].long() * d + channels[None, :]) & _M32  # (T, d)
    x = _mix32(_mix32(key) ^ s)
    u = ((x >> 8).float() + 0.5) / float(1 << 24)  # uniform in (0, 1)
    return _trunc_normal_from_uniform(u, std)


@dataclass(frozen=True)
class RowKey:
    """The h0 key of a training forward: its rows are rows `rows` of the global batch of step `step`
    of a run seeded `seed`. Row b's h0 is a pure function of (seed, step, rows[b], position, channel)
    (`h0_rows`), so a step's initial states do not depend on how its rows are split into micro-batches,
    ordered by loop count or spread over workers."""

    seed: int
    step: int
    rows: tuple[int, ...]  # the global row index of each row of the forward, in order


def _row_keys(key: RowKey) -> list[int]:
    """One 32-bit key per row of `key`, hashed on the host from (seed, step, row)."""
    s = _mix32(((key.seed & _M32) * 0x9E3779B9 + 0x7F4A7C15) & _M32)
    s = _mix32(s ^ ((key.step & _M32) * 0x85EBCA6B + 0x68E31DA4) & _M32)
    return [_mix32(s ^ ((row & _M32) * 0xC2B2AE35 + 0x27D4EB2F) & _M32) for row in key.rows]


def h0_rows(key: RowKey, positions: Tensor, d: int, std: float) -> Tensor:
    """Deterministic truncated-normal (+-3 std) initial states (B, T, d) of the rows of `key`, B =
    len(key.rows): a counter-based hash of (seed, step, global row, position, channel), the int-seed
    recipe of `h0_from_seed` with one key per row. positions: (T,) int64 on the target device; the
    row keys are computed on the host and copied without waiting for the device."""
    rows = torch.tensor(_row_keys(key), dtype=torch.long)  # (B,)
    if positions.device.type == "cuda":
        rows = rows.pin_memory()
    rows = rows.to(positions.device, non_blocking=True)
    channels = torch.arange(d, device=positions.device)
    cell = _mix32((positions[:, None].long() * d + channels[None, :]) & _M32)  # (T, d)
    x = _mix32(cell[None] ^ rows[:, None, None])  # (B, T, d)
    u = ((x >> 8).float() + 0.5) / float(1 << 24)  # uniform in (0, 1)
    return _trunc_normal_from_uniform(u, std)


def draw_h0(batch: int, positions: Tensor, d: int, std: float, h0_seed, like: Tensor) -> Tensor:
    """h0 (B, T, d) in like's dtype and device. `h0_seed`: None = fresh from the global RNG; an int =
    `h0_from_seed` (the same for every row); a `RowKey` = `h0_rows` (training, one state per global
    row); a torch.Generator = drawn from it on its device; a Tensor (B, T, d) = the states themselves
    (rows of a draw made for the whole step, e.g. a run whose checkpoint predates `RowKey`)."""
    if isinstance(h0_seed, int) and not isinstance(h0_seed, bool):
        return h0_from_seed(h0_seed, positions, d, std).to(like.dtype).expand(batch, -1, -1)
    if isinstance(h0_seed, RowKey):
        if len(h0_seed.rows) != batch:
            raise ValueError(f"h0_seed: a RowKey of {len(h0_seed.rows)} rows for a batch of {batch}")
        return h0_rows(h0_seed, positions, d, std).to(like.dtype)
    if isinstance(h0_seed, Tensor):
        if h0_seed.shape != (batch, positions.shape[0], d):
            raise ValueError(
                f"h0_seed: states of shape {tuple(h0_seed.shape)} for ({batch}, {positions.shape[0]}, {d})"
            )
        return h0_seed.to(device=like.device, dtype=like.dtype)
    gen_device = like.device if h0_seed is None else h0_seed.device
    u = torch.rand(batch, positions.shape[0], d, device=gen_device, generator=h0_seed)  # (B, T, d)
    return _trunc_normal_from_uniform(u.to(like.device), std).to(like.dtype)
