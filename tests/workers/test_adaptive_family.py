"""The adaptive job on any family (workers/adaptive/family.py, model/exit_emulation.py): on looplab's own
model the exits emulated from separate forwards agree with the native exit forward at fixed depth and at
the infinite threshold; the example family (examples/universal_transformer.py) runs through the job with
its rows labelled emulated, its fixed depth the depth sweep's loss and its FLOPs its own; what emulation
cannot do is refused at submission naming the field, nothing stored."""

from __future__ import annotations

import pytest
import torch

from looplab import Grid, Queue
from looplab.model.errors import ConfigError
from looplab.model.exit_names import EMULATED, CellKey
from looplab.orchestrator.grid import expand
from looplab.workers import jobs
from looplab.workers.reporter import MemoryReporter
from tests.db_rows import rows
from tests.workers.conftest import tiny_spec

UT = "examples.universal_transformer:factory"
FAMILY = {"family": UT, "family_config": {"d_model": 32, "n_heads": 2}, "optimizer": "adamw"}
EVAL = {"eval_tokens": 512, "batch_size": 8, "device": "cpu"}


def _loss(model, chunks, token_bytes, forward) -> float:
    from looplab.workers.validation import evaluate

    return evaluate(model, chunks, 8, torch.device("cpu"), token_bytes, h0_seed=7, forward=forward).loss


def test_emulated_exits_agree_with_the_native_path_on_looplab_s_model(trained_fixed4):
    from looplab.model.exit_emulation import emulated_exit_forward, exit_natively
    from looplab.model.exits import ExitRule
    from looplab.workers.adaptive.job import ExitLM
    from looplab.workers.inputs import eval_inputs

    ev = eval_inputs(str(trained_fixed4[0]), 512, torch.device("cpu"))
    assert exit_natively(ev.model)
    native, emulated = ExitLM(ev.model, None, 4), ExitLM(ev.model, None, 4, emulated=True)
    fixed = _loss(ev.model, ev.chunks, ev.token_bytes, native.exits)
    assert _loss(ev.model, ev.chunks, ev.token_bytes, emulated.exits) == pytest.approx(fixed, rel=1e-6)
    assert fixed == pytest.approx(_loss(ev.model, ev.chunks, ev.token_bytes, None), rel=1e-6)  # loops 4
    # an infinite threshold stops every token at min_rounds: the forward at 2 on both paths
    rule = ExitRule("kl", float("inf"), 2, 4)
    at_two = [ExitLM(ev.model, rule, 4, emulated=e) for e in (False, True)]
    losses = [_loss(ev.model, ev.chunks, ev.token_bytes, lm.exits) for lm in at_two]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6) and abs(losses[0] - fixed) > 1e-3
    # a finite rule: each token takes the logits of the forward at its own exit round
    idx = ev.chunks[:2, :-1]
    out = emulated_exit_forward(ev.model, idx, ExitRule("argmax", 1, 2, 4), h0_seed=3)
    for t in range(2, 5):
        at_t = ev.model(idx, loops=t, h0_seed=3).logits.float()
        here = out.exit_round == t
        assert torch.equal(out.logits[here], at_t[here])


@pytest.fixture(scope="module")
def ut_run(looplab_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("ut_run")
    spec = jobs.validate("train", tiny_spec(**FAMILY, model={"loops": 3}, tokens=8 * 32 * 40))
    jobs.run("train", spec, MemoryReporter(), out)
    return out


def test_the_example_family_runs_through_the_adaptive_job_emulated(ut_run, tmp_path):
    spec = {
        "checkpoint": str(ut_run),
        "rules": {"state": [0.05], "kl": [0.01], "argmax": [0, "inf"]},
        "kv_strategies": ["per_round"],
        "tasks": ["deduction"],
        "n_per_subset": 2,
        **EVAL,
    }
    reporter = MemoryReporter()
    out = jobs.run("adaptive", jobs.validate("adaptive", spec), reporter, tmp_path / "adaptive")
    evals = {CellKey.parse(r["config"]).rule: r for r in out["adaptive_evals"]}
    assert (
        set(evals) == {"fixed", "state<0.05", "kl<0.01", "argmax>=0", "argmax>=inf"}
        and out["max_rounds"] == 3
    )
    assert all(r["config"].endswith(EMULATED) and r["kv_mib"] is None for r in evals.values())
    assert any("exits emulated" in e["message"] for e in reporter.of("log"))
    sweep = jobs.validate(
        "depth_sweep", {"checkpoint": str(ut_run), "loops": [2, 3], "interaction_loops": [], **EVAL}
    )
    depth = {
        e["loops"]: e["val_loss"]
        for e in jobs.run("depth_sweep", sweep, MemoryReporter(), tmp_path)["depth_evals"]
    }
    # argmax >= 0 stops every token at min_rounds (2), >= inf never: the forwards at 2 and at 3
    fixed, first, never = evals["fixed"], evals["argmax>=0"], evals["argmax>=inf"]
    assert fixed["val_loss"] == pytest.approx(depth[3], rel=1e-6) and fixed["mean_rounds"] == 3
    assert never["val_loss"] == fixed["val_loss"] and never["mean_rounds"] == 3
    assert first["val_loss"] == pytest.approx(depth[2], rel=1e-6) and first["mean_rounds"] == 2
    # the family's own FLOPs: the fixed depth spends its forward at 3, stopping at 2 its forward at 2
    assert (
        fixed["forward_flops_per_token"] == fixed["fixed_flops_per_token"] > first["forward_flops_per_token"]
    )
    assert fixed["equivalent_rounds"] == 3 and first["equivalent_rounds"] == pytest.approx(2)
    assert 2 <= evals["kl<0.01"]["mean_rounds"] <= 3 and out["adaptive_task_scores"]
    assert {r["config"] for r in out["adaptive_exit_rounds"]} == {r["config"] for r in evals.values()}


@pytest.mark.parametrize(
    ("family", "follow", "expected"),
    [
        (UT, {}, "follow.adaptive.kv_strategies: latest, first, last_m: family"),
        (
            UT,
            {"kv_strategies": ["per_round"], "decode_steps": 2},
            "follow.adaptive.decode_steps: decoding with exits runs on looplab's own",
        ),
        (
            "tests.model.test_contract:tiny",
            {"kv_strategies": ["per_round"], "rules": {"state": [0.1]}},
            "follow.adaptive.rules.state: family 'tests.model.test_contract:tiny' has neither the readout",
        ),
        (
            UT,
            {"kv_strategies": ["per_round"], "rules": {"gate": [0.5]}},
            f"follow.adaptive.rules.gate: family {UT!r} has no exit_gate",
        ),
    ],
)
def test_what_emulated_exits_cannot_do_is_refused_at_submission(tmp_path, family, follow, expected):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    base = tiny_spec(**{**FAMILY, "family": family})
    if family != UT:
        base.pop("family_config")
    with pytest.raises(ConfigError) as e:
        q.submit([Grid("ut", base=base, then=["adaptive"], follow={"adaptive": follow})])
    assert expected in str(e.value) and "grid 'ut'" in str(e.value)
    assert rows(q, "SELECT COUNT(*) FROM jobs") == [(0,)]


def test_a_family_s_adaptive_follow_up_with_what_emulation_does_is_accepted():
    follow = {"adaptive": {"kv_strategies": ["per_round"], "rules": {"kl": [0.01]}}}
    plans = expand([Grid("ut", base=tiny_spec(**FAMILY), then=["adaptive"], follow=follow)], jobs)
    assert [p.kind for p in plans if p.kind == "adaptive"] == ["adaptive"]
    with pytest.raises(ConfigError, match="kv_strategies"):
        from looplab.workers.adaptive.family import refuse_family

        refuse_family({"kv_strategies": ["latest"]}, {"family": UT, "capabilities": {}})


def test_a_family_with_the_readout_capability_runs_its_exits_natively():
    from looplab.model.contract import build_model, check_family
    from looplab.model.exit_emulation import exit_natively

    cfg = _small(11)
    assert not exit_natively(build_model(cfg, "tests.model.test_contract:tiny", {"d": 8}).module)
    native = build_model(cfg, "tests.workers.test_adaptive_family:readout_family")
    assert native.capabilities.readout and exit_natively(native.module)
    report = check_family("tests.workers.test_adaptive_family:readout_family", {"vocab_size": 11})
    assert "readout" not in report.fallbacks()


def _small(vocab: int, **overrides):
    from looplab.model.config import ModelConfig

    return ModelConfig(
        vocab_size=vocab, d_model=8, n_heads=1, head_dim=8, n_prelude=1, n_recurrent=1, n_coda=1, **overrides
    )


def readout_family(config):
    """A family whose module has the readout at any round, the rounds with a keep mask and rope: looplab's
    own model built from the family's config."""
    from looplab.families.looped.model import LoopedLM

    return LoopedLM(_small(config["vocab_size"]))


def act_gated_family(config):
    """looplab's own model with an act exit gate, as a family (a `LoopedLM` inside `FamilyLM`)."""
    from looplab.families.looped.model import LoopedLM

    torch.manual_seed(5)
    return LoopedLM(_small(config["vocab_size"], exit_gate="act"))


class GatedFamily(torch.nn.Module):
    """A family of its own class with the readout at any round, the rounds with a keep mask, rope and the
    contract's exit_gate: looplab's model with a geometric gate inside, so its gate's exits are known."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        from looplab.families.looped.model import LoopedLM

        torch.manual_seed(5)
        self.lm = LoopedLM(_small(vocab, exit_gate="geometric"))

    def forward(self, idx, loops=None):
        return self.lm(idx, loops=loops)

    def readout(self, h, idx, ctx=None):
        return self.lm.readout(h, idx, ctx)

    def run_rounds(self, *args, **kwargs):
        return self.lm.run_rounds(*args, **kwargs)

    def rope(self, n):
        return self.lm.rope(n)

    def exit_gate(self, h, t):
        return self.lm.exit_gate(h, t)


def gated_family(config):
    return GatedFamily(config["vocab_size"])


def test_the_gate_rule_runs_on_a_family_with_an_exit_gate_as_on_looplab_s_model():
    """`model.exits._gate_mass` on the family wrapper (FamilyLM): a family's exit_gate read as stop
    probabilities gives the exits of the geometric gate inside it; looplab's model as a family keeps the
    objective it was trained with (act); a family without a gate is refused naming the rule."""
    from looplab.model.contract import build_model, gate_reading
    from looplab.model.exit_gate import STOP_PROBABILITIES
    from looplab.model.exits import ExitRule, exit_forward

    cfg = _small(11)
    idx = torch.randint(0, 11, (3, 16), generator=torch.Generator().manual_seed(2))
    gated = build_model(cfg, "tests.workers.test_adaptive_family:gated_family").module.eval()
    assert gated.caps.exit_gate and gated.caps.readout and gate_reading(gated) == (STOP_PROBABILITIES, 0.0)
    means = []
    with torch.no_grad():
        for q in (0.3, 0.6, 0.9):
            rule = ExitRule("gate", q, 2, 4)
            out, own = (exit_forward(m, idx, rule, h0_seed=1) for m in (gated, gated.inner.lm))
            assert torch.equal(out.exit_round, own.exit_round) and torch.equal(out.logits, own.logits)
            means.append(out.exit_round.float().mean().item())
    assert means == sorted(means) and means[0] < 4  # a gate that stops some tokens early
    act = build_model(cfg, "tests.workers.test_adaptive_family:act_gated_family").module
    assert act.caps.exit_gate and gate_reading(act) == ("act", act.inner.cfg.gate_eps)
    plain = build_model(cfg, "tests.workers.test_adaptive_family:readout_family").module
    with pytest.raises(ConfigError, match="^exit.rule: gate needs a model with an exit gate"):
        exit_forward(plain, idx, ExitRule("gate", 0.5, 2, 4), h0_seed=1)


def test_the_gate_rule_on_a_family_is_accepted_with_a_gate_and_native_exits_only():
    follow = {"adaptive": {"kv_strategies": ["per_round"], "rules": {"gate": [0.5]}}}
    base = tiny_spec(**{**FAMILY, "family": "tests.workers.test_adaptive_family:gated_family"})
    base.pop("family_config")
    plans = expand([Grid("g", base=base, then=["adaptive"], follow=follow)], jobs)
    assert [p.kind for p in plans] == ["train", "adaptive"]
    spec = {"rules": {"gate": [0.5]}, "kv_strategies": ["per_round"]}
    emulated = {"family": "f", "capabilities": {"exit_gate": True, "readout": False}}
    with pytest.raises(ConfigError, match="^rules.gate: family 'f' has no readout at any round"):
        from looplab.workers.adaptive.family import refuse_family

        refuse_family(spec, emulated)
