"""How one training step's rows are split into forwards: micro-batches, loop-count buckets, ranks.

    split_step(counts, micro_batch_size, bucketing, ranks=1) -> per rank, a list of row-index lists

A step is `batch_size` rows (global rows 0..B-1 of `workers.data.shards.get_batch`), each with its loop count
(`LoopedLM.sample_loops`) and its initial state (`model.init.RowKey`), all functions of (seed, step,
global row). The split only decides which rows share a forward, so it never changes what a row
computes: the step's gradient is the same sum over the same rows (the trainer scales each forward's
mean loss by its share of the step's target tokens), to float summation order.

How many forwards, and how many rows each: `model.rounds.forward_sizes` (one rule for the trainer and
the FLOP model). Which rows go together:

- without bucketing, rows in order: rank r holds the contiguous rows r B/R .. (r+1) B/R - 1, cut in order;
- with bucketing (and more than one forward), rows sorted by loop count (largest first; ties keep row
  order, so equal counts give the unbucketed split), cut in order into the R x M forwards, each
  forward's rows then taken in row order: a forward's rows have similar counts,
  so it pads fewer rounds (a forward runs its largest count for every row). Forwards are dealt out one
  micro-step at a time (the next R forwards in sorted order, one per rank), the costliest to the rank
  with the least work so far. Work = rows x rounds run (its largest count). Since a micro-step's R
  forwards differ by at most its spread (costliest minus cheapest), no rank ends with more than the
  largest spread of one micro-step above another: bucketing does not make one rank the straggler.

Pure Python, torch-free: counts may be a list or a CPU tensor (read with `.tolist()`).
"""

from __future__ import annotations

from collections.abc import Sequence

from looplab.model.rounds import forward_sizes


def split_step(
    counts, micro_batch_size: int | None, bucketing: bool, ranks: int = 1
) -> list[list[list[int]]]:
    """The forwards of one step: `out[r][j]` = the global rows rank r runs in its j-th forward. Every
    row appears once; every rank runs the same number of forwards (see the module docstring)."""
    counts = _as_list(counts)
    batch = len(counts)
    sizes = forward_sizes(batch, micro_batch_size, ranks)  # largest first: micro-step j's R are alike
    per_rank = len(sizes) // ranks
    if not bucketing or len(sizes) == 1:  # one forward: nothing to group
        share = batch // ranks
        return [_cut(list(range(r * share, (r + 1) * share)), sizes[r::ranks]) for r in range(ranks)]
    order = sorted(range(batch), key=lambda r: -counts[r])  # stable: ties keep row order
    forwards = [sorted(rows) for rows in _cut(order, sizes)]  # each in row order
    out: list[list[list[int]]] = [[] for _ in range(ranks)]
    load = [0] * ranks
    for j in range(per_rank):
        step = sorted(forwards[j * ranks : (j + 1) * ranks], key=lambda rows: -work(counts, rows))
        for rank, rows in zip(sorted(range(ranks), key=lambda r: load[r]), step):
            out[rank].append(rows)
            load[rank] += work(counts, rows)
    return out


def _cut(rows: list[int], sizes: Sequence[int]) -> list[list[int]]:
    """`rows` cut in order into consecutive pieces of `sizes`."""
    pieces, start = [], 0
    for size in sizes:
        pieces.append(rows[start : start + size])
        start += size
    return pieces


def work(counts: Sequence[int], rows: Sequence[int]) -> int:
    """Rows x rounds of one forward: every row of it runs the forward's largest loop count."""
    return len(rows) * max(counts[r] for r in rows)


def padded_rounds(counts, forwards: Sequence[Sequence[int]]) -> int:
    """Row-rounds the forwards run beyond each row's own count (the padding; 0 for equal counts)."""
    counts = _as_list(counts)
    return sum(work(counts, rows) - sum(counts[r] for r in rows) for rows in forwards)


def _as_list(counts) -> list[int]:
    return [int(c) for c in (counts.tolist() if hasattr(counts, "tolist") else counts)]
