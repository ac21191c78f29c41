"""The learned exit (model/exit_gate.py, LoopedLM with `exit_gate`): off it changes nothing, on its
objectives are what docs/adaptive.md says, computed by hand here; bad settings are refused by name."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from looplab.families.looped.model import LoopedLM
from looplab.model.counts import param_count
from looplab.model.errors import ConfigError
from looplab.model.exit_gate import act_halting, cumulative_mass, exit_distribution
from looplab.model.flops import gate_flops, readout_flops, training_flops
from looplab.model.memory import training_memory
from looplab.model.presets import preset

SMALL = dict(vocab_size=32, d_model=32, n_heads=2, head_dim=16, seq_len=16)
OBJECTIVES = ("entropy", "geometric", "act")


def built(seed: int = 0, **overrides) -> LoopedLM:
    torch.manual_seed(seed)
    return LoopedLM(preset("lean", **SMALL, **overrides))


def batch(cfg, rows: int = 2, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, cfg.vocab_size, (rows, cfg.seq_len), generator=g)
    return idx, torch.randint(0, cfg.vocab_size, (rows, cfg.seq_len), generator=g)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_the_gate_draws_nothing_from_the_models_random_stream(objective):
    plain = built()
    after_plain = torch.rand(3)
    gated = built(exit_gate=objective)
    after_gated = torch.rand(3)
    assert torch.equal(after_plain, after_gated)  # the global generator is where it would be without it
    mine, theirs = plain.state_dict(), gated.state_dict()
    assert set(theirs) - set(mine) == {"gate.weight", "gate.bias"}
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert param_count(gated.cfg)["total"] == sum(p.numel() for p in gated.parameters())
    assert param_count(gated.cfg)["total"] - param_count(plain.cfg)["total"] == 32 + 4


def test_gate_off_trains_the_same_curve_as_the_model_of_before():
    """With the gate off the training forward is the plain one: its loss is the cross-entropy at R of
    the readout of the rounds, and a few optimizer steps give the same losses as a gated model's
    evaluation forwards would not (the gate only acts in training)."""
    model = built()
    cfg = model.cfg
    idx, y = batch(cfg)
    out = model(idx, targets=y, h0_seed=3)
    assert out.task_loss is None and out.expected_rounds is None
    states = model.round_states(idx, cfg.loops, h0_seed=3)
    by_hand = F.cross_entropy(model.readout(states[-1], idx).flatten(0, 1), y.flatten())
    torch.testing.assert_close(out.loss, by_hand, rtol=0, atol=0)
    # the curve: the same steps on a gated model in eval mode and a gate-off model agree bit for bit
    losses = []
    for m in (built(), built(exit_gate="entropy")):
        opt = torch.optim.SGD([p for n, p in m.named_parameters() if not n.startswith("gate.")], lr=0.1)
        curve = []
        for step in range(3):
            m.train(m.gate is None)  # the gated one evaluated: its forward is the gate-less model's
            loss = m(idx, targets=y, h0_seed=step).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            curve.append(loss.item())
        losses.append(curve)
    assert losses[0] == losses[1]


@pytest.mark.parametrize("objective", ("entropy", "geometric"))
def test_a_gate_that_never_stops_gives_the_gateless_task_loss_at_R(objective):
    gated, plain = built(exit_gate=objective), built()
    with torch.no_grad():
        gated.gate.bias.fill_(-1e4)  # λ_t = 0 exactly: every token's mass is at R
    idx, y = batch(gated.cfg)
    got = gated(idx, targets=y, h0_seed=5)
    want = plain(idx, targets=y, h0_seed=5).loss
    torch.testing.assert_close(got.task_loss, want, rtol=1e-6, atol=0)
    assert got.expected_rounds.item() == pytest.approx(gated.cfg.loops)


def test_entropy_objective_at_beta_zero_is_the_expected_loss_by_hand():
    model = built(exit_gate="entropy", gate_coef=0.0)
    cfg, R = model.cfg, model.cfg.loops
    idx, y = batch(cfg, rows=3)
    out = model(idx, targets=y, h0_seed=7)
    states = model.round_states(idx, R, h0_seed=7)[1:]  # rounds 1..R
    with torch.no_grad():
        lam = [model.exit_gate(h, t) for t, h in enumerate(states, start=1)]
        losses = [
            F.cross_entropy(model.readout(h, idx).flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
            for h in states
        ]
    expected, survive = torch.zeros_like(lam[0]), torch.ones_like(lam[0])
    for t in range(R):  # p(t) = λ_t ∏_{s<t}(1 − λ_s), the rest of the mass at R
        p = survive if t == R - 1 else lam[t] * survive
        expected += p * losses[t]
        survive = survive * (1 - lam[t])
    torch.testing.assert_close(out.loss, expected.mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.task_loss, out.loss)


def test_entropy_and_geometric_regularisers():
    model = built(exit_gate="geometric", gate_coef=0.5, gate_prior=0.3)
    idx, y = batch(model.cfg)
    out = model(idx, targets=y, h0_seed=2)
    assert out.loss.item() > out.task_loss.item()  # β KL >= 0
    ent = built(exit_gate="entropy", gate_coef=0.5)(idx, targets=y, h0_seed=2)
    assert ent.loss.item() < ent.task_loss.item()  # − β H < 0


def test_act_gate_gets_gradient_from_the_task_loss():
    model = built(exit_gate="act", gate_coef=0.0)  # τ = 0: the loss is the mixture's cross-entropy alone
    idx, y = batch(model.cfg)
    out = model(idx, targets=y, h0_seed=4)
    torch.testing.assert_close(out.loss, out.task_loss)
    out.loss.backward()
    assert model.gate.weight.grad.abs().sum() > 0 and model.gate.bias.grad[:-1].abs().sum() > 0


def test_distributions_and_act_halting_by_hand():
    lam = torch.tensor([[0.5], [0.5], [0.5], [0.9]])
    torch.testing.assert_close(exit_distribution(lam).flatten(), torch.tensor([0.5, 0.25, 0.125, 0.125]))
    torch.testing.assert_close(
        cumulative_mass(lam, "entropy").flatten()[:3], torch.tensor([0.5, 0.75, 0.875])
    )
    weights, n = act_halting(torch.tensor([[0.3], [0.6], [0.5], [0.2]]), eps=0.05)
    assert n.tolist() == [3]  # 0.3 + 0.6 + 0.5 >= 0.95 at round 3
    torch.testing.assert_close(weights.flatten(), torch.tensor([0.3, 0.6, 0.1, 0.0]))
    _, n = act_halting(torch.tensor([[0.1], [0.1]]), eps=0.01)
    assert n.tolist() == [2]  # never reached: R


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_flops_and_memory_count_the_per_round_readouts(objective):
    cfg = preset("lean", **SMALL)
    gated = dataclasses.replace(cfg, exit_gate=objective)
    extra = training_flops(gated, 4).total - training_flops(cfg, 4).total
    assert gate_flops(gated, cfg.seq_len) == pytest.approx(3 * readout_flops(cfg, cfg.seq_len) + 4 * 2 * 32)
    assert extra == pytest.approx(3 * gate_flops(gated, cfg.seq_len))  # forward + backward
    assert training_memory(gated, 4, "cpu", "adamw") > training_memory(cfg, 4, "cpu", "adamw")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(recipe="plain", exit_gate="entropy"), "exit_gate"),  # a plain transformer: no rounds
        (dict(recipe="parcae", exit_gate="geometric"), "exit_gate"),  # per-row counts: R undefined
        (dict(exit_gate="ouro"), "exit_gate"),
        (dict(exit_gate="entropy", gate_coef=-0.1), "gate_coef"),
        (dict(exit_gate="entropy", gate_coef=float("inf")), "gate_coef"),
        (dict(exit_gate="geometric", gate_prior=1.0), "gate_prior"),
        (dict(exit_gate="geometric", gate_prior=0.0), "gate_prior"),
        (dict(exit_gate="entropy", gate_prior=0.3), "gate_prior"),  # a prior only for geometric
        (dict(exit_gate="act", gate_eps=1.0), "gate_eps"),
        (dict(gate_coef=0.5), "gate_coef"),  # a coefficient without a gate
    ],
)
def test_bad_gate_settings_are_refused_by_name(overrides, field):
    recipe = overrides.pop("recipe", "lean")
    with pytest.raises(ConfigError, match=rf"^{field}:"):
        preset(recipe, **SMALL, **overrides)


# ---- the gate as an exit rule (model/exits.py `gate`) -------------------------------------------------


def test_gate_rule_thresholds_sweep_monotonically_and_one_is_the_fixed_depth():
    from looplab.model.exits import ExitRule, exit_forward

    model = built(exit_gate="entropy").eval()
    R = model.cfg.loops
    idx, _ = batch(model.cfg, rows=3)
    fixed = exit_forward(model, idx, h0_seed=0, exits=torch.full(idx.shape, R), max_rounds=R)
    means = []
    for q in (0.05, 0.3, 0.5, 0.7, 0.9, 1.0):
        out = exit_forward(model, idx, ExitRule("gate", q, 2, R), h0_seed=0)
        means.append(out.exit_round.float().mean().item())
    assert means == sorted(means) and means[0] < means[-1] == R
    with torch.no_grad():
        model.gate.bias.fill_(1e4)  # saturated: λ = 1 and the mass is 1 from round 1
    saturated = exit_forward(model, idx, ExitRule("gate", 1.0, 2, R), h0_seed=0)
    assert torch.equal(saturated.logits, fixed.logits) and bool((saturated.exit_round == R).all())
    assert bool((exit_forward(model, idx, ExitRule("gate", 0.99, 2, R), h0_seed=0).exit_round == 2).all())


@pytest.mark.parametrize("q", [0.0, 1.5, -1.0])
def test_gate_rule_threshold_out_of_range_is_refused(q):
    from looplab.model.exits import ExitRule

    with pytest.raises(ConfigError, match="^exit.threshold:"):
        ExitRule("gate", q, 2, 4)


def test_gate_rule_on_a_model_without_a_gate_is_refused():
    from looplab.model.exits import ExitRule, exit_forward

    model = built().eval()
    idx, _ = batch(model.cfg)
    with pytest.raises(ConfigError, match="^exit.rule: gate needs a model with an exit gate"):
        exit_forward(model, idx, ExitRule("gate", 0.5, 2, 4), h0_seed=0)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_the_objective_splits_over_micro_batches(objective):
    """A step split into forwards (each scaled by its share of the tokens, as the trainer does) has the
    whole batch's loss and gradient, to float rounding: every objective is a mean over tokens."""
    from looplab.model.init import RowKey

    model, grads = built(exit_gate=objective, gate_coef=0.1), []
    idx, y = batch(model.cfg, rows=4)
    for split in ([0, 1, 2, 3], [0, 1], [2, 3]):
        out = model(idx[split], targets=y[split], h0_seed=RowKey(0, 0, tuple(split)))
        (out.loss * (len(split) / 4)).backward()  # its share of the step's tokens
        if len(split) == 4:
            grads.append([p.grad.clone() for p in model.parameters()])
            model.zero_grad()
    for whole, parts in zip(grads[0], [p.grad for p in model.parameters()]):
        torch.testing.assert_close(parts, whole, rtol=1e-4, atol=1e-6)
