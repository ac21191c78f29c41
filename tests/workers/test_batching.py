"""The split of a step into forwards (workers/train/batching.py) and the FLOP model of a split (model/flops.py).

(b) Bucketing computes fewer padded rounds than no bucketing on sampled batches, and the FLOP model
counts exactly what runs: the rounds each forward really executes (with and without autograd), times
its rows, are the model's count of the split; FlopCounterMode agrees with its FLOPs; its expectation
over the sampler matches the mean over sampled steps split the trainer's way.
Ranks > 1 (for data-parallel training): every row once, the same number of forwards per rank, and
bucketing leaves no rank more than one micro-step's spread of work above another.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from looplab.families.looped.model import LoopedLM
from looplab.model.flops import step_flops, training_flops
from looplab.model.presets import preset
from looplab.model.rounds import forward_sizes
from looplab.workers.train.batching import padded_rounds, split_step, work
from tests.model.conftest import randomize
from tests.model.test_flops import CPU_FLASH, SMALL

PARCAE = LoopedLM(preset("parcae", **SMALL))  # its sampler: Poisson(8) per sequence


def _poisson_counts(n: int, step: int) -> list[int]:
    return PARCAE.sample_loops(n, step, seed=3).tolist()


def _rows(split) -> list[int]:
    return sorted(r for rank in split for rows in rank for r in rows)


def test_forward_sizes():
    assert forward_sizes(8, None) == [8] and forward_sizes(8, 2) == [2, 2, 2, 2]
    assert forward_sizes(8, 3) == [3, 3, 2] and forward_sizes(10, 4) == [4, 3, 3]
    assert forward_sizes(256, 32, ranks=8) == [32] * 8 and forward_sizes(8, 1, ranks=2) == [1] * 8
    assert forward_sizes(10, 3, ranks=2) == [3, 3, 2, 2]  # per rank 5 rows = 3 + 2
    assert forward_sizes(8, 100) == [8]
    with pytest.raises(ValueError, match="batch_size: 9 rows cannot be shared evenly by 2 ranks"):
        forward_sizes(9, 2, ranks=2)


@pytest.mark.parametrize(
    "batch,micro,ranks", [(8, 2, 1), (8, 3, 1), (10, 4, 1), (16, 3, 2), (64, 8, 4), (8, None, 2)]
)
@pytest.mark.parametrize("bucketing", [True, False])
def test_every_row_once_in_forwards_of_at_most_micro(batch, micro, ranks, bucketing):
    counts = _poisson_counts(batch, batch)
    split = split_step(counts, micro, bucketing, ranks)
    assert len(split) == ranks and _rows(split) == list(range(batch))
    assert len({len(rank) for rank in split}) == 1  # lockstep: every rank the same number of forwards
    assert {sum(len(rows) for rows in rank) for rank in split} == {batch // ranks}
    for rank in split:
        assert all(0 < len(rows) <= (micro or batch) and rows == sorted(rows) for rows in rank)
    if not bucketing:  # rank r holds its contiguous share, in order
        share = batch // ranks
        assert [sum(rank, []) for rank in split] == [
            list(range(r * share, (r + 1) * share)) for r in range(ranks)
        ]


def test_bucketing_with_equal_counts_is_the_plain_split():
    for counts in ([4] * 8, torch.full((12,), 8)):
        assert split_step(counts, 3, True) == split_step(counts, 3, False)
    assert split_step([9, 1, 5, 2], None, True) == [[[0, 1, 2, 3]]]  # one forward: row order kept


def test_bucketing_pads_fewer_rounds_on_sampled_batches():
    """(b), by the split: on every sampled batch of parcae's Poisson(8) counts, sorted forwards of 8
    pad fewer row-rounds than forwards of 8 in row order, and in total at most half as many."""
    plain = bucketed = 0
    for seed in range(20):
        counts = _poisson_counts(32, seed)
        (a,), (b,) = split_step(counts, 8, False), split_step(counts, 8, True)
        assert padded_rounds(counts, b) < padded_rounds(counts, a)
        plain, bucketed = plain + padded_rounds(counts, a), bucketed + padded_rounds(counts, b)
    assert bucketed < 0.5 * plain


@pytest.mark.parametrize("batch,micro,ranks", [(64, 8, 4), (256, 32, 8), (48, 4, 3), (64, 2, 8)])
def test_bucketing_does_not_make_a_rank_the_straggler(batch, micro, ranks):
    for seed in range(10):
        counts = _poisson_counts(batch, seed)
        split = split_step(counts, micro, True, ranks)
        load = [sum(work(counts, rows) for rows in rank) for rank in split]
        steps = list(zip(*split))  # micro-step j: one forward per rank
        spread = max(max(work(counts, f) for f in fs) - min(work(counts, f) for f in fs) for fs in steps)
        assert max(load) - min(load) <= spread, (load, spread)
        plain = split_step(counts, micro, False, ranks)
        plain_load = [sum(work(counts, rows) for rows in rank) for rank in plain]
        assert max(load) <= max(plain_load)  # the straggler is never slower than without bucketing
        assert sum(load) <= sum(plain_load)


# ---- the FLOP model of a split ---------------------------------------------------------------------


class RoundCounter:
    """Counts the rounds a model really executes: calls of its first recurrent layer, times the rows
    of each call, split by whether autograd was on."""

    def __init__(self, model: LoopedLM) -> None:
        self.rows = self.grad_rows = 0
        model.recurrent[0].register_forward_hook(self.hook)

    def hook(self, module, args, out) -> None:
        self.rows += args[0].shape[0]
        self.grad_rows += args[0].shape[0] if torch.is_grad_enabled() else 0


@pytest.mark.parametrize(
    "recipe,overrides",
    [
        ("parcae", {}),
        ("lean", {"loop_sampler": "poisson_seq", "grad_rounds": 2}),
        ("plain", {"loop_sampler": "poisson_seq", "loops": 3, "grad_rounds": 2}),
    ],
    ids=["aligned", "staggered", "no-injection"],
)
def test_the_flop_model_counts_exactly_what_runs(recipe, overrides):
    """(b), by the model: a sampled batch of 8 in forwards of 2, bucketed or not: the row-rounds each
    forward executes (with autograd or not) are exactly the FLOP model's count of the split, and
    FlopCounterMode's FLOPs are its FLOPs (2 %, as for one forward in tests/model/test_flops.py)."""
    cfg = preset(recipe, **SMALL, **overrides)
    torch.manual_seed(0)
    model = randomize(LoopedLM(cfg))
    counter = RoundCounter(model)
    counts = model.sample_loops(8, 5, 1)
    assert len(set(counts.tolist())) > 2
    idx = torch.randint(0, cfg.vocab_size, (8, cfg.seq_len))
    tokens = idx.numel()
    for bucketing in (True, False):
        (forwards,) = split_step(counts, 2, bucketing)
        counter.rows = counter.grad_rows = 0
        forward = backward = 0.0
        for rows in forwards:
            with FlopCounterMode(display=False, custom_mapping=CPU_FLASH) as flop:
                out = model(idx[rows], targets=idx[rows], loops=counts[rows])
            forward += flop.get_total_flops()
            with FlopCounterMode(display=False, custom_mapping=CPU_FLASH) as flop:
                out.loss.backward()
            backward += flop.get_total_flops()
        flops = step_flops(cfg, counts.tolist(), forwards=forwards)
        assert counter.rows == round(flops.mean_rounds * 8) and counter.grad_rows == round(
            flops.mean_grad_rounds * 8
        )
        assert flops.mean_rounds * 8 == pytest.approx(counter.rows, abs=1e-9)
        assert flops.forward == pytest.approx(forward / tokens, rel=0.02)
        assert flops.backward == pytest.approx(backward / tokens, rel=0.02)
        whole = step_flops(cfg, counts.tolist())
        assert flops.padding_waste < whole.padding_waste and flops.total < whole.total
    bucketed, plain = (
        step_flops(cfg, counts.tolist(), forwards=split_step(counts, 2, b)[0]) for b in (True, False)
    )
    assert bucketed.mean_rounds <= plain.mean_rounds  # (strictly fewer padded rounds: the test above)


def test_step_flops_of_a_split_refuses_a_split_that_is_not_one():
    with pytest.raises(ValueError, match="every row 0..3 exactly once"):
        step_flops(preset("parcae"), [1, 2, 3, 4], forwards=[[0, 1], [1, 2]])


@pytest.mark.parametrize(
    "recipe,overrides",
    [
        ("parcae", {}),
        ("lean", {"loop_sampler": "poisson_seq", "grad_rounds": 2}),
        ("plain", {"loop_sampler": "poisson_seq", "loops": 3, "grad_rounds": 2}),
    ],
    ids=["aligned", "staggered", "no-injection"],
)
@pytest.mark.parametrize("bucketing", [True, False])
def test_the_expectation_of_a_split_matches_sampled_steps(recipe, overrides, bucketing):
    """`training_flops(micro_batch_size=, bucketing=)` (order statistics when bucketed) against the mean
    of `step_flops` over 3,000 sampled steps split by `split_step`, as the trainer splits them."""
    cfg, batch, micro, steps = preset(recipe, **SMALL, **overrides), 16, 4, 3000
    expected = training_flops(cfg, batch, micro_batch_size=micro, bucketing=bucketing)
    model = LoopedLM(cfg)
    total = rounds = grads = wasted = 0.0
    for step in range(steps):
        counts = model.sample_loops(batch, step, seed=3).tolist()
        flops = step_flops(cfg, counts, forwards=split_step(counts, micro, bucketing)[0])
        total += flops.total
        rounds += flops.mean_rounds
        grads += flops.mean_grad_rounds
        wasted += flops.padding_waste * flops.recurrent
    assert expected.mean_rounds == pytest.approx(rounds / steps, rel=0.01)
    assert expected.mean_grad_rounds == pytest.approx(grads / steps, rel=0.01)
    assert expected.total == pytest.approx(total / steps, rel=0.01)
    assert expected.padding_waste * expected.recurrent == pytest.approx(wasted / steps, rel=0.05)
    whole = training_flops(cfg, batch)
    assert expected.padding_waste < whole.padding_waste  # smaller forwards pad less, bucketed or not


def test_the_expectation_of_one_forward_is_the_batch_expectation():
    for recipe in ("parcae", "parcae_per_batch", "fixed4"):
        cfg = preset(recipe)
        assert training_flops(cfg, 8, micro_batch_size=8, bucketing=True) == training_flops(cfg, 8)
        assert training_flops(cfg, 8, micro_batch_size=None) == training_flops(cfg, 8)
    cfg = preset("parcae")
    one_per_row = training_flops(cfg, 8, micro_batch_size=1)
    assert one_per_row.padding_waste == pytest.approx(0.0, abs=1e-12)
    assert one_per_row.total == pytest.approx(training_flops(preset("parcae_per_batch"), 8).total)
    for b in (True, False):  # a per-batch or fixed count has no padding to remove
        assert training_flops(
            preset("parcae_per_batch"), 8, micro_batch_size=2, bucketing=b
        ) == training_flops(preset("parcae_per_batch"), 8)
    ranked = training_flops(cfg, 64, micro_batch_size=8, bucketing=True, ranks=4)
    assert ranked == training_flops(cfg, 64, micro_batch_size=8, bucketing=True)  # the same 8 forwards of 8


def test_bucketing_halves_parcae_padding_at_the_published_batch():
    """At 256 x 2,048 in micro-batches of 32, the FLOP model's padding: bucketing removes most of it."""
    cfg = preset("parcae", size="144m")
    whole = training_flops(cfg, 256)
    plain = training_flops(cfg, 256, micro_batch_size=32)
    bucketed = training_flops(cfg, 256, micro_batch_size=32, bucketing=True)
    assert 0.15 < whole.padding_waste and bucketed.padding_waste < 0.5 * plain.padding_waste


# ---- the trainer's measured padding (workers/train/trainer.py `_count_step`) --------------------------------


def _trained(tmp_path, steps: int, **kw):
    """A tiny parcae run of `steps` steps of 8 rows: its result row and its per-step metrics."""
    from looplab.workers.reporter import MemoryReporter
    from looplab.workers.train import job as train
    from tests.workers.conftest import tiny_spec

    rep = MemoryReporter()
    spec = train.Spec.from_dict(tiny_spec(recipe="parcae", tokens=8 * 32 * steps, **kw))
    train.run(spec, rep, tmp_path)
    row = next(e["row"] for e in rep.of("result") if e["table"] == "train_results")
    return row, dict(rep.curve("padding_waste"))


def test_measured_padding_is_lower_with_bucketing_on_the_same_rows(looplab_cache, tmp_path):
    """The same seed samples the same rows and loop counts each step: split into micro-batches of 2,
    bucketing pads fewer rounds than the rows in order, step by step, and over the run. The row's
    waste is the measured one, not the FLOP model's expectation of one forward of the batch."""
    off, waste_off = _trained(tmp_path / "off", 4, micro_batch_size=2, bucketing=False)
    on, waste_on = _trained(tmp_path / "on", 4, micro_batch_size=2, bucketing=True)
    assert list(waste_on) == list(waste_off) == [0, 1, 2, 3]
    assert all(waste_on[s] <= waste_off[s] for s in waste_on) and sum(waste_on.values()) < sum(
        waste_off.values()
    )
    assert 0 < on["padding_waste"] < off["padding_waste"]
    assert on["flops_per_token"] == off["flops_per_token"]  # the budget accounting does not change


def test_measured_padding_equals_a_hand_count(looplab_cache, tmp_path, monkeypatch):
    """Loop counts set by hand, 8 rows in micro-batches of 2. parcae runs a forward's largest count n
    for all its rows (the first n - c held for a row of c), with gradient through the last 4 global
    rounds; a row's own rounds cost c forward + 2 min(c, 4) backward (all rounds cost the same).
    Bucketed, the rows sorted by count make forwards of counts (9, 8), (7, 3), (3, 2), (1, 1): their
    largest 9, 7, 3, 1, so they compute 2 (9 + 8) + 2 (7 + 8) + 2 (3 + 6) + 2 (1 + 2) = 88 units; the
    rows need 17 + 16 + 15 + 2 x 9 + 6 + 2 x 3 = 78. In row order the forwards hold (1, 9), (2, 8),
    (3, 3), (7, 1), largest 9, 8, 3, 7: 2 (17 + 16 + 9 + 15) = 114 computed, for the same 78."""
    import torch

    from looplab.families.looped.model import LoopedLM

    counts = [1, 9, 2, 8, 3, 3, 7, 1]
    monkeypatch.setattr(LoopedLM, "sample_loops", lambda self, b, step, seed=0: torch.tensor(counts))
    on, waste_on = _trained(tmp_path / "on", 1, micro_batch_size=2, bucketing=True)
    off, waste_off = _trained(tmp_path / "off", 1, micro_batch_size=2, bucketing=False)
    assert waste_on[0] == pytest.approx((88 - 78) / 88) and on["padding_waste"] == pytest.approx(10 / 88)
    assert waste_off[0] == pytest.approx((114 - 78) / 114) and off["padding_waste"] == pytest.approx(36 / 114)
