"""Validation loss on the fixed validation set, shared by training and the depth sweep.

Bits per byte: the summed cross-entropy of the predicted tokens in bits, divided by the UTF-8 bytes
those tokens stand for (`val_bpb = val_loss / ln 2 * tokens / bytes`), so runs with different
tokenizers compare. Each validation batch uses a fixed h0 seed (`h0_seed + batch index`) so two
evaluations of the same weights give the same number. A batch may run in several forwards of
`micro_batch_size` sequences (`eval_forwards`): the seeded h0 is the same for every row, so the split
changes no sequence's loss (at 256 sequences of 2,048 tokens the fp32 logits of one forward alone
would be ~69 GB). `evaluate` is the one loop behind every validation loss: training's, the depth
sweep's, and the adaptive job's, which hands it its exit forward (`forward=`) and reads each forward's
exit rounds (`on_forward=`), so its fixed-depth loss is the sweep's.

Far copies (`far_distance=D`): a target token is *far* when its previous occurrence in the sequence lies
more than D positions back and it does not occur within D positions (`previous_gap` > D: the gap to the
closest earlier occurrence), the tokens a model can only predict by copying from far back. The split
reports the far and near mean losses and the far share of the predicted tokens. This is definition
`FAR_DEFINITION` = 2; definition 1 (the mask of earlier sweeps) counted a token as far whenever it also
occurred beyond a window, even when it occurred inside it too, which flags most tokens of a text.

`loop_geometry` measures the rounds themselves on the same batches and seeds: the per-round metrics
and the interaction matrix of `model.geometry` (definitions there), averaged over every token. It runs
in fp32 without autocast: the interaction compares updates of two forwards, which bf16 would blur.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from looplab.model import geometry


def autocast(device: torch.device):
    """bf16 autocast on CUDA only; CPU runs stay fp32 (and bit-reproducible)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass
class EvalResult:
    loss: float
    bpb: float
    far_copy_loss: float | None = None
    near_loss: float | None = None
    tokens: int = 0  # predicted tokens the loss is the mean over
    far_share: float | None = None  # far tokens / predicted tokens (None: no far split asked)


@dataclass
class GeometryResult:
    rel_change: list[float]  # per round t = 1..n, mean over tokens
    angle: list[float]
    state_var: list[float]
    update_norm: list[float]  # mean ||h_t - h_{t-1}|| per round
    bf16_resolution: list[float]  # mean ||bf16(h_{t-1}) - h_{t-1}|| / ||h_{t-1}|| per round
    interaction: list[list[float]] | None = None  # (n, n), entry [i-1][j-1] for i < j, NaN elsewhere

    @property
    def change_ratio(self) -> list[float]:
        """Per round, mean ||Δ_t|| over mean ||Δ_{t-1}|| (NaN for round 1; model.geometry)."""
        return geometry.change_ratio(self.update_norm)

    @property
    def bf16_round(self) -> int | None:
        """The first round whose change falls below bf16 resolution of its state (model.geometry)."""
        return geometry.bf16_round(self.rel_change, self.bf16_resolution)


def previous_gap(c: torch.Tensor) -> torch.Tensor:
    """(B, L) int tokens -> (B, L) long: at each position p, p − j for the closest earlier position j with
    the same token (c[b, j] == c[b, p], j < p), 0 where the token has not occurred before. A stable sort
    by token value lists each value's positions in order, so a position's predecessor in the sorted
    order is its previous occurrence: O(L log L), where comparing every pair would take L² memory."""
    order = torch.sort(c, dim=1, stable=True).indices
    values = torch.gather(c, 1, order)
    gap_sorted = torch.zeros_like(order)
    repeat = values[:, 1:] == values[:, :-1]
    gap_sorted[:, 1:] = torch.where(repeat, order[:, 1:] - order[:, :-1], 0)
    return torch.zeros_like(order).scatter_(1, order, gap_sorted)


def far_copy_mask(x: torch.Tensor, y: torch.Tensor, distance: int) -> torch.Tensor:
    """(B, T) bool: target y[b, t], at position t + 1 of its sequence (x[b] then y[b, T − 1]), is far:
    its previous occurrence lies more than `distance` positions back and none lies within `distance`."""
    gap = previous_gap(torch.cat([x, y[:, -1:]], dim=1))[:, 1:]
    return gap > distance


def eval_forwards(n: int, batch_size: int, micro_batch_size: int | None = None):
    """(batch index, slice of chunks, whether it ends the batch) of every forward over n chunks: batches
    of `batch_size` (batch i seeds its h0 with h0_seed + i), each in forwards of at most
    `micro_batch_size` chunks."""
    step = batch_size if micro_batch_size is None else min(micro_batch_size, batch_size)
    for i, start in enumerate(range(0, n, batch_size)):
        stop = min(start + batch_size, n)
        for sub in range(start, stop, step):
            yield i, slice(sub, min(sub + step, stop)), sub + step >= stop


@torch.no_grad()
def evaluate(
    model,
    chunks: torch.Tensor,
    batch_size: int,
    device: torch.device,
    token_bytes: torch.Tensor,
    loops=None,
    h0_seed: int = 0,
    far_distance: int | None = None,
    on_batch=None,
    micro_batch_size: int | None = None,
    forward=None,
    on_forward=None,
) -> EvalResult:
    """Mean CE over every predicted token of `chunks` (N, T+1); with `far_distance`, the far-copy split
    (`far_copy_mask`: far and near mean losses and the far share).
    Batches of `batch_size` chunks, each run in forwards of `micro_batch_size` (None: the batch).
    `forward(x, h0_seed)`: the forward of one piece, an output with `.logits` (None: `model` at `loops`);
    `on_forward(rows, out, ce)`: shown each forward's slice of `chunks`, its output and its per-token
    losses (B, T), for what a caller measures besides the loss."""
    if forward is None:

        def forward(x: torch.Tensor, seed: int):
            return model(x, loops=loops, h0_seed=seed)

    was_training = model.training
    model.eval()
    total = n = 0.0
    n_bytes = 0
    far_sum = far_n = 0.0
    for i, rows, ends_batch in eval_forwards(len(chunks), batch_size, micro_batch_size):
        c = chunks[rows].to(device)
        x, y = c[:, :-1], c[:, 1:]
        with autocast(device):
            out = forward(x, h0_seed + i)
        ce = F.cross_entropy(out.logits.float().flatten(0, 1), y.flatten(), reduction="none").view_as(y)
        if on_forward is not None:
            on_forward(rows, out, ce)
        total += ce.sum().item()
        n += ce.numel()
        n_bytes += int(token_bytes[y.cpu()].sum())
        if far_distance is not None:
            m = far_copy_mask(x, y, far_distance)
            far_sum += ce[m].sum().item()
            far_n += int(m.sum())
        if on_batch is not None and ends_batch:
            on_batch(i + 1)
    model.train(was_training)
    loss = total / n
    res = EvalResult(loss=loss, bpb=loss / math.log(2) * n / max(1, n_bytes), tokens=int(n))
    if far_distance is not None:
        res.far_share = far_n / n
        res.far_copy_loss = far_sum / far_n if far_n else None
        res.near_loss = (total - far_sum) / (n - far_n) if n > far_n else None
    return res


@torch.no_grad()
def loop_geometry(
    model,
    chunks: torch.Tensor,
    batch_size: int,
    device: torch.device,
    loops: int,
    h0_seed: int = 0,
    interaction_chunks: int = 0,
    on_batch=None,
    micro_batch_size: int | None = None,
) -> GeometryResult:
    """The `model.geometry` metrics of a LoopedLM at `loops` rounds over `chunks` (N, T+1), batch i with
    h0 seed `h0_seed + i` (as `evaluate`): rel_change, angle and state_var per round over every chunk,
    and the interaction matrix over the first `interaction_chunks` chunks (0: none; loops - 1 extra
    forwards per batch). Means over batches are weighted by their tokens, so they are means over tokens,
    and a batch may run in forwards of `micro_batch_size` chunks (every metric is a mean over tokens)."""
    was_training = model.training
    model.eval()
    sums: dict[str, torch.Tensor] = {}
    inter_sum: torch.Tensor | None = None
    n_tokens = inter_tokens = 0
    # a model whose later rounds reuse round 1's keys and values cannot run without round 1
    skipped = range(2 if getattr(model, "reuses_kv", False) else 1, loops)
    for i, rows, ends_batch in eval_forwards(len(chunks), batch_size, micro_batch_size):
        start = rows.start
        x = chunks[rows, :-1].to(device)
        tokens = x.numel()
        states = model.round_states(x, loops, h0_seed=h0_seed + i)  # (loops + 1, B, T, d)
        for name, values in geometry.round_metrics(states).items():
            sums[name] = sums.get(name, 0.0) + values.cpu() * tokens
        n_tokens += tokens
        if start < interaction_chunks and loops > 1:
            x = x[: interaction_chunks - start]
            part = states[:, : x.shape[0]]
            seed = h0_seed + i

            def skip_forward(r: int, x=x, seed=seed) -> torch.Tensor:
                return model.round_states(x, loops, h0_seed=seed, skip_round=r - 1)

            matrix = geometry.interaction(part, skip_forward, skipped) * x.numel()
            inter_sum = matrix if inter_sum is None else inter_sum + matrix
            inter_tokens += x.numel()
        if on_batch is not None and ends_batch:
            on_batch(i + 1)
    model.train(was_training)
    per_round = {name: (total / n_tokens).tolist() for name, total in sums.items()}
    matrix = None if inter_sum is None else (inter_sum / inter_tokens).tolist()
    return GeometryResult(**per_round, interaction=matrix)
