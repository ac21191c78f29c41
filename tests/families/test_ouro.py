"""The Ouro-style family (families/ouro) against the model contract: conformance with its exit gate
and its own training objective, the objective's formulas (stage I entropy-regularised, stage II gate
tuning with the language model frozen), its FLOPs against FlopCounterMode, its KV cache (a slot per
loop and layer) against the full forward, its exit path, and every job kind from one spec with the
`gate` rule run natively."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from looplab.families.ouro import factory
from looplab.model.contract import check_family, measure_flops_per_token
from looplab.model.exit_names import EMULATED, CellKey
from looplab.workers import jobs
from looplab.workers.reporter import MemoryReporter
from tests.workers.conftest import tiny_spec

NAME = "families.ouro:factory"
TINY = {"vocab_size": 64, "seq_len": 16, "d_model": 32, "n_heads": 2, "mlp": 48}
FAMILY = {"family": NAME, "family_config": {"d_model": 32, "n_heads": 2, "mlp": 48}, "optimizer": "adamw"}
# Ouro trains at a fixed step count (no sampler) and has no randomness to key
FALLBACKS = {"sample_loops", "row_key"}


def _model(**kw):
    torch.manual_seed(0)
    return factory({**TINY, **kw})


def _batch(seed: int = 1, shape=(3, 12)):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, shape, generator=g), torch.randint(0, 64, shape, generator=g)


def test_the_family_meets_the_contract_with_its_exit_gate_and_its_own_objective():
    report = check_family(NAME, dict(TINY), loops=3)
    caps = report.capabilities
    assert set(report.fallbacks()) == FALLBACKS and not report.split_dependent
    assert caps.exit_gate and caps.training_loss and caps.readout and caps.kv_cache and caps.round_states
    assert caps.kv_exits and report.kv_strategies == ("full",)


@pytest.mark.parametrize(
    ("given", "field"),
    [({"d_model": 30}, "n_heads"), ({"objective": "kl"}, "objective"), ({"entropy_coef": -1}, "entropy_coef"),
     ({"n_layers": 0}, "n_layers"), ({"total_ut_steps": 4}, "total_ut_steps")],
)  # fmt: skip
def test_a_bad_config_is_refused_naming_the_field(given, field):
    from looplab.model.contract import FamilyError

    with pytest.raises(FamilyError, match=f"family_config: {field}"):
        check_family(NAME, {**TINY, **given})


def test_stage_one_is_the_entropy_regularised_expected_loss():
    """Σ_t p(t) L_t − β H(p), p from the gate's stop probabilities after each step (the last step takes
    the remaining mass), computed here from the parts the contract exposes."""
    model = _model(entropy_coef=0.1)
    idx, targets = _batch()
    out = model.training_loss(idx, targets, loops=3)
    states = model.round_states(idx, 3)[1:]
    lam = torch.stack([model.exit_gate(h, t + 1) for t, h in enumerate(states)])  # (3, B, T)
    p = torch.stack([lam[0], (1 - lam[0]) * lam[1], (1 - lam[0]) * (1 - lam[1])])
    ce = torch.stack(
        [F.cross_entropy(model.readout(h).transpose(1, 2), targets, reduction="none") for h in states]
    )
    task, entropy = (p * ce).sum(0).mean(), -(p * p.log()).sum(0).mean()
    torch.testing.assert_close(out.task_loss, task)
    torch.testing.assert_close(out.loss, task - 0.1 * entropy)
    torch.testing.assert_close(out.expected_rounds, (p * torch.arange(1, 4).view(3, 1, 1)).sum(0).mean())
    torch.testing.assert_close(out.logits, model(idx, loops=3))
    torch.testing.assert_close(model.exit_probabilities(idx, 3), p)


def test_stage_two_tunes_the_gate_alone_towards_stopping_where_the_next_step_gains_little():
    model = _model(objective="gate_tuning")
    idx, targets = _batch()
    out = model.training_loss(idx, targets, loops=3)
    out.loss.backward()
    grads = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
    assert grads == {"early_exit_gate.weight", "early_exit_gate.bias"}  # the language model is frozen
    states = model.round_states(idx, 3)[1:]
    ce = torch.stack(
        [F.cross_entropy(model.readout(h).transpose(1, 2), targets, reduction="none") for h in states]
    )
    stop = 1 - torch.sigmoid(50 * ((ce[:-1] - ce[1:]).clamp_min(0) - 0.005))
    lam = torch.stack([model.exit_gate(h, t + 1) for t, h in enumerate(states[:-1])])
    torch.testing.assert_close(out.loss, F.binary_cross_entropy(lam, stop))
    tuned = copy.deepcopy(model)
    opt = torch.optim.Adam(tuned.early_exit_gate.parameters(), lr=0.05)
    for _ in range(30):
        opt.zero_grad()
        tuned.training_loss(idx, targets, loops=3).loss.backward()
        opt.step()
    assert tuned.training_loss(idx, targets, loops=3).loss < out.loss - 0.01


class _Objective(nn.Module):
    """The family's training objective as a forward, for the FLOP counter."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx, loops):
        return self.model.training_loss(idx, idx, loops=loops).logits


@pytest.mark.parametrize("loops", [1, 3])
def test_flops_per_token_match_the_counter_on_the_training_objective(loops):
    model = _model()
    assert model.flops_per_token(loops) == measure_flops_per_token(
        _Objective(model), 64, TINY["seq_len"], loops
    )


def test_the_cache_decodes_what_the_forward_computes_and_holds_a_slot_per_loop_and_layer():
    model = _model().eval()
    idx, _ = _batch(2, (2, 10))
    cache = model.setup_cache(2, 10, loops=3)
    first = model.prefill(idx[:, :4], cache)
    steps = [model.decode_step(idx[:, t], cache) for t in range(4, 10)]
    with torch.no_grad():
        torch.testing.assert_close(torch.cat([first, torch.stack(steps, 1)], 1), model(idx, loops=3))
    assert cache.nbytes() == model.kv_cache_bytes(2, 10, loops=3) == 2 * 3 * 2 * 2 * 10 * 32 * 4
    assert model.setup_cache(2, 10, loops=3, dtype=torch.bfloat16).nbytes() * 2 == cache.nbytes()


def test_the_exit_path_is_the_forward_at_fixed_depth_and_the_gate_rule_reads_its_gate():
    from looplab.model.contract import build_model
    from looplab.model.exit_emulation import exit_natively
    from looplab.model.exits import ExitRule, exit_forward, family_exit_forward
    from looplab.model.presets import preset

    cfg = preset("fixed4", "tiny", vocab_size=64, seq_len=16, loops=4)
    lm = build_model(cfg, NAME, {k: TINY[k] for k in ("d_model", "n_heads", "mlp")}).module.eval()
    assert exit_natively(lm)
    idx, _ = _batch(5, (2, 8))
    with torch.no_grad():
        at = {n: lm(idx, loops=n).logits for n in (2, 4)}
        fixed = exit_forward(lm, idx, h0_seed=0, exits=torch.full(idx.shape, 4), max_rounds=4)
        assert torch.equal(fixed.logits, at[4]) and (fixed.exit_round == 4).all()
        exits = torch.randint(1, 5, idx.shape, generator=torch.Generator().manual_seed(6))
        assert not torch.allclose(exit_forward(lm, idx, h0_seed=0, exits=exits, max_rounds=4).logits, at[4])
        # the gate rule with a threshold near 0 stops every token at its first decision: the forward at 2
        first = exit_forward(lm, idx, ExitRule("gate", 1e-9, 2, 4), h0_seed=0)
        assert (first.exit_round == 2).all()
        torch.testing.assert_close(first.logits, at[2])
        # decoding token by token through the `full` cache with those exits is the parallel exit path
        parallel = exit_forward(lm, idx, h0_seed=0, exits=exits, max_rounds=4)
        stepped = family_exit_forward(lm, idx, h0_seed=0, exits=exits, max_rounds=4, strategy="full")
        torch.testing.assert_close(stepped.logits, parallel.logits, rtol=1e-5, atol=1e-5)
        assert torch.equal(stepped.exit_round, exits)


def test_the_family_trains_with_its_objective_and_runs_every_job_kind(tmp_path, looplab_cache):
    spec = jobs.validate("train", tiny_spec(**FAMILY, model={"loops": 3}, tokens=8 * 32 * 24, log_every=4))
    rep = MemoryReporter()
    train = jobs.run("train", spec, rep, tmp_path / "train")
    assert train["final_val_loss"] < math.log(256)
    losses = [m["value"] for m in rep.of("metric") if m["key"] == "train_loss"]
    assert losses[-1] < losses[0]
    keys = {m["key"] for m in rep.of("metric")}
    assert any("rounds" in k for k in keys), keys  # the learned exit's expected steps are reported

    sweep = {"checkpoint": str(tmp_path / "train"), "loops": [1, 3], "eval_tokens": 512}
    out = jobs.run("depth_sweep", jobs.validate("depth_sweep", sweep), MemoryReporter(), tmp_path / "sweep")
    depth = {e["loops"]: e["val_loss"] for e in out["depth_evals"]}
    assert list(depth) == [1, 3]

    arch = {k: spec[k] for k in ("recipe", "size", "model", "family", "family_config")}
    bench = jobs.validate("decode_bench", {**arch, "context_lens": [48], "batch_sizes": [1], "steps": 2})
    (row,) = jobs.run("decode_bench", bench, MemoryReporter(), tmp_path / "bench")["rows"]
    assert "recompute" not in row["arch"] and row["kv_cache_mb"] > 0

    adaptive = {
        "checkpoint": str(tmp_path / "train"),
        "rules": {"gate": [0.5, 1.0]},
        "kv_strategies": ["per_round", "full"],
        **{"eval_tokens": 512, "batch_size": 8, "device": "cpu"},
    }
    out = jobs.run("adaptive", jobs.validate("adaptive", adaptive), MemoryReporter(), tmp_path / "adaptive")
    cells = {(c.rule, c.strategy): r for r in out["adaptive_evals"] for c in [CellKey.parse(r["config"])]}
    assert not any(r["config"].endswith(EMULATED) for r in cells.values())
    assert cells[("fixed", "per_round")]["val_loss"] == pytest.approx(depth[3], rel=1e-6)
    gated = [r for (rule, _), r in cells.items() if rule.startswith("gate")]
    assert gated and all(1 <= r["mean_rounds"] <= 3 for r in gated)
    # its `full` cache decoded token by token with the gate's exits is the parallel exit path's function
    for rule in {rule for rule, _ in cells}:
        full, per_round = cells[(rule, "full")], cells[(rule, "per_round")]
        assert (
            full["val_loss"] == pytest.approx(per_round["val_loss"], rel=1e-4)
            and not full["changes_function"]
        )
    model = factory({**FAMILY["family_config"], "vocab_size": 256, "seq_len": 32})
    assert cells[("fixed", "full")]["kv_mib"] * 2**20 == model.kv_cache_bytes(1, 32, loops=3)


def test_stage_two_trains_the_gate_alone_from_a_stage_one_run(tmp_path, looplab_cache):
    """The two stages as two train jobs: stage II (`objective: gate_tuning`, `init_from` stage I's
    run) starts from stage I's weights and moves only the exit gate's."""
    from looplab.workers import checkpoint as ckpt

    stage1 = jobs.validate("train", tiny_spec(**FAMILY, model={"loops": 3}, tokens=8 * 32 * 6))
    jobs.run("train", stage1, MemoryReporter(), tmp_path / "stage1")
    config = {**FAMILY["family_config"], "objective": "gate_tuning", "init_from": str(tmp_path / "stage1")}
    stage2 = tiny_spec(**{**FAMILY, "family_config": config}, model={"loops": 3}, tokens=8 * 32 * 6, seed=1)
    jobs.run("train", jobs.validate("train", stage2), MemoryReporter(), tmp_path / "stage2")
    before, after = (ckpt.load(tmp_path / run / "final.pt")["model"] for run in ("stage1", "stage2"))
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert moved == {"inner.early_exit_gate.weight", "inner.early_exit_gate.bias"}


def test_a_missing_stage_one_run_is_refused_naming_init_from(tmp_path):
    from looplab.model.contract import FamilyError

    with pytest.raises(FamilyError, match="init_from: .* is not a checkpoint"):
        check_family(NAME, {**TINY, "objective": "gate_tuning", "init_from": str(tmp_path / "nothing")})
    with pytest.raises(FamilyError, match="family_config: init_from: expected a checkpoint path"):
        check_family(NAME, {**TINY, "init_from": 3})
