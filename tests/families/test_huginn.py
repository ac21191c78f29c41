"""The Huginn-style family (families/huginn) against the model contract: conformance, row-keyed
initial states and recurrence counts that do not depend on the split, truncated backprop, its FLOPs
(checked against FlopCounterMode) and the published configuration's counts, its KV cache across
recurrences under both strategies (checked against the full forward and the bytes the tensors hold),
its exit path (the adaptive job's rules run natively), and every job kind from one spec."""

from __future__ import annotations

import json
import math

import pytest
import torch

from looplab.families.huginn import PUBLISHED, KVStrategy, factory, published_counts
from looplab.model.contract import check_family, measure_flops_per_token
from looplab.model.exit_names import EMULATED, CellKey
from looplab.model.init import RowKey
from looplab.workers import jobs
from looplab.workers.reporter import MemoryReporter
from tests.workers.conftest import tiny_spec

NAME = "families.huginn:factory"
TINY = {"vocab_size": 64, "seq_len": 16, "d_model": 32, "n_heads": 2, "mlp": 48}
FAMILY = {"family": NAME, "family_config": {"d_model": 32, "n_heads": 2, "mlp": 48}, "optimizer": "adamw"}


def _model(**kw):
    torch.manual_seed(0)
    return factory({**TINY, **kw})


# a learned gate is not Huginn's, nor an objective other than the cross-entropy
NO_GATE = {
    "exit_gate": "no learned exit: the gate exit rule is refused",
    "training_loss": "cross-entropy of the forward's logits",
}


def test_the_family_meets_the_contract_with_every_capability_but_a_learned_exit_gate():
    report = check_family(NAME, dict(TINY), loops=2)
    assert report.fallbacks() == NO_GATE and report.capabilities.readout
    assert not report.split_dependent and report.n_params > 0 and not report.flops_measured


@pytest.mark.parametrize(
    ("given", "field"),
    [({"d_model": 30}, "n_heads"), ({"mlp": 0}, "mlp"), ({"qk_bias": 1}, "qk_bias"), ({"depth": 2}, "depth")],
)
def test_a_bad_config_is_refused_naming_the_field(given, field):
    from looplab.model.contract import FamilyError

    with pytest.raises(FamilyError, match=f"family_config: {field}"):
        check_family(NAME, {**TINY, **given})


def test_initial_states_and_recurrence_counts_do_not_depend_on_the_split():
    model = _model().train()
    idx = torch.randint(0, 64, (4, 12), generator=torch.Generator().manual_seed(1))
    counts = model.sample_loops(4, step=7, seed=3)
    assert torch.equal(counts, model.sample_loops(4, step=7, seed=3)) and len(set(counts.tolist())) == 1
    assert {int(model.sample_loops(1, s, 3)[0]) for s in range(40)} != {int(counts[0])}  # it varies by step
    n = int(counts[0])
    with torch.no_grad():
        whole = model(idx, loops=n, row_key=RowKey(3, 7, (0, 1, 2, 3)))
        parts = [model(idx[list(rows)], loops=n, row_key=RowKey(3, 7, rows)) for rows in ((2, 0), (3, 1))]
    assert torch.equal(whole[[2, 0]], parts[0]) and torch.equal(whole[[3, 1]], parts[1])
    with torch.no_grad():
        other = model(idx, loops=n, row_key=RowKey(3, 8, (0, 1, 2, 3)))
    assert not torch.allclose(whole, other)  # the key changes the initial state


def test_only_the_last_recurrences_carry_gradient():
    model = _model(backprop_depth=2).train()
    seen: list[bool] = []
    model.adapter.register_forward_hook(lambda *_: seen.append(torch.is_grad_enabled()))
    loss = model(torch.randint(0, 64, (2, 8)), loops=5).sum()
    loss.backward()
    assert seen == [False, False, False, True, True]
    assert model.prelude[0].attn.qkv.weight.grad.abs().sum() > 0  # the input reaches the gradient steps


@pytest.mark.parametrize("loops", [1, 2])
def test_flops_per_token_match_the_counter_while_every_recurrence_has_gradient(loops):
    """Every matmul as the counter sees it, and the CPU attention kernel counted as its matmuls, dense,
    as looplab's FLOP model does by default (model/flops.py): 4 d T per layer."""
    model = _model(backprop_depth=2)
    assert model.flops_per_token(loops) == measure_flops_per_token(model, 64, TINY["seq_len"], loops)


def test_the_published_configuration_is_counted_without_allocating_it():
    counts = published_counts()
    assert 3.5e9 < counts["params"] < 3.6e9  # "3.5B parameters" (arXiv:2502.05171)
    assert counts["params"] == counts["params_once"] + counts["params_recurrent"] + counts["params_embedding"]
    flops = counts["flops_per_token"]
    assert list(flops) == [4, 8, 16, 32, 64] and all(
        a < b for a, b in zip(flops.values(), list(flops.values())[1:])
    )
    d, core = PUBLISHED["d_model"], PUBLISHED["n_core"]
    per_recurrence = 4 * d * d + core * (
        2 * (4 * d * d + 3 * d * PUBLISHED["mlp"]) + 4 * d * PUBLISHED["seq_len"]
    )
    assert flops[64] - flops[32] == pytest.approx(32 * per_recurrence)  # forward only past backprop_depth


def test_the_published_counts_are_printed_for_people(capsys):
    from looplab.families.huginn.__main__ import main

    main()
    out = capsys.readouterr().out
    assert "3,564,976,800" in out and "186.4" in out  # parameters; GFLOP per token at 32 recurrences


def _decode(model, idx, prompt: int, **cache_kw):
    cache = model.setup_cache(idx.shape[0], idx.shape[1], **cache_kw)
    first = model.prefill(idx[:, :prompt], cache)
    steps = [model.decode_step(idx[:, t], cache) for t in range(prompt, idx.shape[1])]
    return torch.cat([first, torch.stack(steps, 1)], 1), cache


def test_the_full_cache_decodes_what_the_full_forward_computes():
    model = _model().eval()
    idx = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = model(idx, loops=3)
    got, cache = _decode(model, idx, 5, loops=3)
    assert torch.allclose(got, want, atol=1e-5)
    latest, _ = _decode(model, idx, 5, loops=3, strategy="latest_per_slot")
    assert torch.allclose(latest[:, :5], want[:, :5], atol=1e-5)  # the prompt: one pass, exact
    assert not torch.allclose(latest, want, atol=1e-3)  # decoding reads the earlier tokens' latest keys
    one, _ = _decode(model, idx, 5, loops=1, strategy="latest_per_slot")
    with torch.no_grad():
        assert torch.allclose(one, model(idx, loops=1), atol=1e-5)  # one recurrence: nothing to share


@pytest.mark.parametrize("strategy", list(KVStrategy))
@pytest.mark.parametrize("loops", [2, 6])
def test_a_cache_holds_the_bytes_its_strategy_counts(strategy, loops):
    model = _model().eval()
    cache = model.setup_cache(3, 20, loops=loops, strategy=strategy)
    held = cache.nbytes()
    assert held == model.kv_cache_bytes(3, 20, loops=loops, strategy=strategy)
    core = loops * 2 if strategy == KVStrategy.FULL else 2  # n_core = 2 slots per recurrence, or 2
    assert held == 2 * (1 + core + 1) * 3 * 20 * 32 * 4  # K and V, prelude + core + coda slots, fp32
    half = model.setup_cache(3, 20, loops=loops, strategy=strategy, dtype=torch.bfloat16)
    assert half.nbytes() * 2 == held


def test_a_per_token_exit_leaves_its_latest_entry_in_the_skipped_recurrences():
    model = _model().eval()
    idx = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(3))
    cache = model.setup_cache(2, 6, loops=4)
    model.prefill(idx[:, :4], cache)
    logits = model.decode_step(idx[:, 4], cache, loops=torch.tensor([2, 4]))  # row 0 exits after 2 of 4
    for j in range(2):
        last = cache.k[cache.core_slot(1, j), 0, :, 4]
        for r in (2, 3):
            assert torch.equal(cache.k[cache.core_slot(r, j), 0, :, 4], last)
            assert not torch.equal(
                cache.k[cache.core_slot(r, j), 1, :, 4], cache.k[cache.core_slot(1, j), 1, :, 4]
            )
    # each row as if the whole batch ran its count: the rows do not see each other's exits
    for row, n in ((0, 2), (1, 4)):
        same = model.setup_cache(2, 6, loops=4)
        model.prefill(idx[:, :4], same)
        torch.testing.assert_close(model.decode_step(idx[:, 4], same, loops=n)[row], logits[row])
    with pytest.raises(ValueError, match="from 1 to the cache's 4 recurrences"):
        model.decode_step(idx[:, 5], cache, loops=5)


def test_the_latest_per_slot_strategy_keeps_an_exited_rows_entry_and_overwrites_the_others():
    model = _model().eval()
    idx = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(4))
    cache = model.setup_cache(2, 5, loops=3, strategy="latest_per_slot")
    model.prefill(idx[:, :4], cache)
    model.decode_step(idx[:, 4], cache, loops=[1, 3])
    first = model.setup_cache(2, 5, loops=3, strategy="latest_per_slot")
    model.prefill(idx[:, :4], first)
    model.decode_step(idx[:, 4], first, loops=1)  # every row stops after the first recurrence
    slot = cache.core_slot(2, 0)
    assert slot == cache.core_slot(0, 0)  # one slot per core layer, whatever the recurrence
    assert torch.equal(cache.k[slot, 0, :, 4], first.k[slot, 0, :, 4])  # row 0: its first recurrence's
    assert not torch.equal(cache.k[slot, 1, :, 4], first.k[slot, 1, :, 4])  # row 1: overwritten by its third


def test_the_family_runs_every_job_kind(tmp_path, looplab_cache):
    spec = jobs.validate("train", tiny_spec(**FAMILY, model={"loops": 3}, tokens=8 * 32 * 24))
    train = jobs.run("train", spec, MemoryReporter(), tmp_path / "train")
    assert train["final_val_loss"] < math.log(256)
    facts = json.loads((tmp_path / "train" / "family.json").read_text())
    assert not facts["flops_measured"] and facts["fallbacks"] == NO_GATE and not facts["split_dependent"]

    sweep = {
        "checkpoint": str(tmp_path / "train"),
        "loops": [1, 3],
        "eval_tokens": 512,
        "interaction_loops": [2],
    }
    out = jobs.run("depth_sweep", jobs.validate("depth_sweep", sweep), MemoryReporter(), tmp_path / "sweep")
    assert [e["loops"] for e in out["depth_evals"]] == [1, 3] and out["round_interactions"]
    out_sweep = out["depth_evals"]

    arch = {k: spec[k] for k in ("recipe", "size", "model", "family", "family_config")}
    bench = jobs.validate("decode_bench", {**arch, "context_lens": [48], "batch_sizes": [1], "steps": 2})
    (row,) = jobs.run("decode_bench", bench, MemoryReporter(), tmp_path / "bench")["rows"]
    model = factory({**FAMILY["family_config"], "vocab_size": 256, "seq_len": 32})
    assert row["kv_cache_mb"] * 2**20 == model.kv_cache_bytes(1, 48) and "recompute" not in row["arch"]

    ev = {"checkpoint": str(tmp_path / "train"), "tasks": ["deduction"], "loops": [1, 3], "n_per_subset": 2}
    scores = jobs.run("eval", jobs.validate("eval", ev), MemoryReporter(), tmp_path / "eval")["task_scores"]
    assert {(s["loops"], s["subset"]) for s in scores} >= {(1, "all"), (3, "all")}

    # the adaptive job runs its exit rules natively (rows not labelled emulated), at its own FLOPs
    adaptive = {
        "checkpoint": str(tmp_path / "train"),
        "rules": {"state": [0.05], "kl": [0.01], "argmax": [0, "inf"]},
        "kv_strategies": ["per_round"],
        **{"eval_tokens": 512, "batch_size": 8, "device": "cpu"},
    }
    rep = MemoryReporter()
    out = jobs.run("adaptive", jobs.validate("adaptive", adaptive), rep, tmp_path / "adaptive")
    evals = {CellKey.parse(r["config"]).rule: r for r in out["adaptive_evals"]}
    assert set(evals) == {"fixed", "state<0.05", "kl<0.01", "argmax>=0", "argmax>=inf"}
    assert not any(r["config"].endswith(EMULATED) for r in evals.values())
    assert not any("emulated" in e["message"] for e in rep.of("log"))
    fixed, first, never = evals["fixed"], evals["argmax>=0"], evals["argmax>=inf"]
    depth3 = next(e["val_loss"] for e in out_sweep if e["loops"] == 3)
    assert fixed["val_loss"] == pytest.approx(depth3, rel=1e-6) and fixed["mean_rounds"] == 3
    assert never["val_loss"] == fixed["val_loss"] and first["mean_rounds"] == 2
    assert fixed["forward_flops_per_token"] > first["forward_flops_per_token"]
    assert 2 <= evals["kl<0.01"]["mean_rounds"] <= 3 and 2 <= evals["state<0.05"]["mean_rounds"] <= 3


def test_the_exit_path_is_the_forward_at_fixed_depth_and_decoding_under_full_with_per_token_exits():
    """run_rounds with a keep mask and readout at any recurrence (the contract's exit path, run by
    model.exits): every token at R is the forward at R exactly, an infinite threshold the forward at
    min_rounds; given per-token exits, the sequence forward equals decoding token by token from an empty
    `full` cache with each token's recurrences (an exited token's last keys and values read later)."""
    from looplab.model.contract import build_model
    from looplab.model.exit_emulation import exit_natively
    from looplab.model.exits import ExitRule, exit_forward
    from looplab.model.presets import preset

    cfg = preset("fixed4", "tiny", vocab_size=64, seq_len=16, loops=4)
    lm = build_model(cfg, NAME, {k: TINY[k] for k in ("d_model", "n_heads", "mlp")}).module.eval()
    assert exit_natively(lm)
    idx = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(5))
    at = {n: lm(idx, loops=n, h0_seed=0).logits for n in (2, 4)}
    fixed = exit_forward(lm, idx, h0_seed=0, exits=torch.full(idx.shape, 4), max_rounds=4)
    assert torch.equal(fixed.logits, at[4]) and (fixed.exit_round == 4).all()
    first = exit_forward(lm, idx, ExitRule("kl", float("inf"), 2, 4), h0_seed=0, stop=True)
    assert torch.equal(first.logits, at[2]) and first.rounds_run == 2
    exits = torch.randint(1, 5, idx.shape, generator=torch.Generator().manual_seed(6))
    out = exit_forward(lm, idx, h0_seed=0, exits=exits, max_rounds=4)
    cache = lm.inner.setup_cache(2, 8, loops=4, strategy="full")
    steps = [lm.inner.decode_step(idx[:, t], cache, loops=exits[:, t]) for t in range(8)]
    torch.testing.assert_close(out.logits, torch.stack(steps, 1), rtol=1e-4, atol=1e-4)
    assert not torch.allclose(out.logits, at[4], atol=1e-3)  # the exits changed the function


def test_micro_batches_train_the_same_model(tmp_path, looplab_cache):
    """A step's rows split into micro-batches draw the same recurrence count and initial states as the
    whole batch (row key, (seed, step)): the curves agree to float rounding of the gradient sums."""
    spec = tiny_spec(**FAMILY, tokens=8 * 32 * 6, log_every=1)
    losses = []
    for micro in (8, 4):
        rep = MemoryReporter()
        jobs.run(
            "train", jobs.validate("train", {**spec, "micro_batch_size": micro}), rep, tmp_path / str(micro)
        )
        losses.append([m["value"] for m in rep.of("metric") if m["key"] == "train_loss"])
    assert len(losses[0]) == 6 and losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-6)
