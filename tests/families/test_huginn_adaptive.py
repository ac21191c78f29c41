"""The Huginn-style family's own KV strategies across recurrences as the adaptive job's strategies
(issue 37, item 3): `full` and `latest_per_slot` cells decoded token by token through the family's
cache with each token's rule decided inside its step (`model.exits.family_exit_forward`). `full` is
the function of the parallel exit path (per_round) with per-token exits, so its rows equal per_round's;
`latest_per_slot` changes the function and allocates one slot per core layer; the KV columns are the
bytes the cache's tensors hold; what a family cannot run is refused at submission naming the field."""

from __future__ import annotations

import pytest
import torch

from looplab import Grid, Queue
from looplab.families.huginn import factory
from looplab.model.errors import ConfigError
from looplab.model.exit_names import CellKey
from looplab.model.exits import ExitRule, exit_forward, family_exit_forward
from looplab.orchestrator.grid import expand
from looplab.workers import jobs
from looplab.workers.reporter import MemoryReporter
from tests.db_rows import rows
from tests.families.test_huginn import FAMILY, TINY
from tests.workers.conftest import tiny_spec

R = 3


@pytest.fixture(scope="module")
def huginn_run(tmp_path_factory, looplab_cache):
    out = tmp_path_factory.mktemp("huginn") / "train"
    spec = jobs.validate("train", tiny_spec(**FAMILY, model={"loops": R}, tokens=8 * 32 * 24))
    jobs.run("train", spec, MemoryReporter(), out)
    return out


def test_the_full_cache_decoded_token_by_token_is_the_parallel_exit_path():
    torch.manual_seed(0)
    model = factory(TINY).eval()
    idx = torch.randint(0, TINY["vocab_size"], (3, 12))
    given = torch.randint(1, 5, (3, 12))
    parallel = exit_forward(model, idx, None, h0_seed=0, exits=given, max_rounds=4)
    stepped = family_exit_forward(model, idx, None, h0_seed=0, exits=given, max_rounds=4, strategy="full")
    assert torch.equal(stepped.exit_round, given)
    torch.testing.assert_close(stepped.logits, parallel.logits, rtol=0, atol=1e-5)

    # a rule on the state decides the same exits inside each step (a reading rule's readouts differ:
    # decoding, the coda sees earlier tokens' final states; the parallel forward, their current round's)
    rule = ExitRule("state", 0.5, 2, 4)
    parallel = exit_forward(model, idx, rule, h0_seed=0, max_rounds=4)
    stepped = family_exit_forward(model, idx, rule, h0_seed=0, max_rounds=4, strategy="full")
    assert torch.equal(stepped.exit_round, parallel.exit_round) and parallel.exit_round.float().mean() < 3.9
    torch.testing.assert_close(stepped.logits, parallel.logits, rtol=0, atol=1e-5)

    # latest_per_slot: every recurrence reads each earlier token's latest entry, another function at
    # several recurrences, the same at one (a single slot per layer either way)
    lps = family_exit_forward(model, idx, None, h0_seed=0, exits=torch.full_like(idx, 4), max_rounds=4,
                              strategy="latest_per_slot")  # fmt: skip
    assert (lps.logits - model(idx, loops=4)).abs().max() > 1e-3
    one = family_exit_forward(model, idx, None, h0_seed=0, exits=torch.ones_like(idx), max_rounds=1,
                              strategy="latest_per_slot")  # fmt: skip
    torch.testing.assert_close(one.logits, model(idx, loops=1), rtol=0, atol=1e-5)


def test_a_family_strategy_survives_pickling_with_its_flag():
    """A cell's strategy crosses process boundaries (Ray) with what it says of the function."""
    import pickle

    from looplab.workers.adaptive.family import FamilyKV

    back = pickle.loads(pickle.dumps(FamilyKV("latest_per_slot", True)))
    assert back == "latest_per_slot" and back.changes_function is True


def test_the_adaptive_job_runs_the_family_s_own_strategies(huginn_run):
    adaptive = {
        "checkpoint": str(huginn_run),
        "rules": {"state": [0.6], "kl": [0.01], "argmax": ["inf"]},
        "kv_strategies": ["per_round", "full", "latest_per_slot"],
        **{"eval_tokens": 256, "batch_size": 8, "device": "cpu"},
    }
    out = jobs.run("adaptive", jobs.validate("adaptive", adaptive), MemoryReporter(), huginn_run.parent / "a")
    ev = {(c.rule, c.strategy): r for r in out["adaptive_evals"] for c in [CellKey.parse(r["config"])]}
    assert {s for _, s in ev} == {"per_round", "full", "latest_per_slot"} and len(ev) == 12

    # full is per_round's function: the same losses and exits, token by token against the parallel path
    for rule in ("fixed", "state<0.6", "argmax>=inf"):
        full, per_round = ev[(rule, "full")], ev[(rule, "per_round")]
        assert full["val_loss"] == pytest.approx(per_round["val_loss"], rel=1e-6)
        assert full["mean_rounds"] == per_round["mean_rounds"]
        assert not full["changes_function"] and ev[(rule, "latest_per_slot")]["changes_function"]
    assert ev[("state<0.6", "full")]["mean_rounds"] < R
    # kl reads the coda out every round: decoding, it sees earlier tokens' final states (a few exits move)
    full, per_round = ev[("kl<0.01", "full")], ev[("kl<0.01", "per_round")]
    assert (
        full["mean_rounds"] == pytest.approx(per_round["mean_rounds"], abs=0.05) and full["mean_rounds"] < R
    )
    assert ev[("fixed", "full")]["mean_rounds"] == R
    lps = ev[("fixed", "latest_per_slot")]
    assert lps["val_loss"] != pytest.approx(ev[("fixed", "full")]["val_loss"], rel=1e-4)
    assert ev[("argmax>=inf", "latest_per_slot")]["val_loss"] == lps["val_loss"]

    # the KV columns: the bytes a one-sequence cache of each strategy holds (per_round has no cache)
    model = factory({**FAMILY["family_config"], "vocab_size": 256, "seq_len": 32})
    for strategy in ("full", "latest_per_slot"):
        held = model.setup_cache(1, 32, loops=R, strategy=strategy).nbytes()
        assert held == model.kv_cache_bytes(1, 32, loops=R, strategy=strategy)
        assert ev[("kl<0.01", strategy)]["kv_mib"] * 2**20 == held == out["kv_bytes"][strategy]
    assert ev[("fixed", "per_round")]["kv_mib"] is None
    assert ev[("fixed", "latest_per_slot")]["kv_mib"] < ev[("fixed", "full")]["kv_mib"]


def test_a_family_s_own_strategies_are_accepted_at_submission_and_others_refused(tmp_path):
    huginn = {**FAMILY, "family_config": {"d_model": 32, "n_heads": 2, "mlp": 48}}
    good = {"adaptive": {"kv_strategies": ["full", "latest_per_slot"], "rules": {"kl": [0.01]}}}
    plans = expand([Grid("h", base=tiny_spec(**huginn), then=["adaptive"], follow=good)], jobs)
    assert [p.spec["kv_strategies"] for p in plans if p.kind == "adaptive"] == [["full", "latest_per_slot"]]

    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    for base, strategies, expected in (
        (tiny_spec(**huginn), ["latest"], "accepted: ['per_round', 'full', 'latest_per_slot']"),
        (tiny_spec(), ["full"], "not a KV strategy of looplab's model"),
    ):
        follow = {"adaptive": {"kv_strategies": strategies}}
        with pytest.raises(ConfigError) as e:
            q.submit([Grid("h", base=base, then=["adaptive"], follow=follow)])
        assert "follow.adaptive.kv_strategies" in str(e.value) and expected in str(e.value)
    assert rows(q, "SELECT COUNT(*) FROM jobs") == [(0,)]
    with pytest.raises(ConfigError, match="kv_strategies: 'Full!'"):
        jobs.validate("adaptive", {"checkpoint": "x", "kv_strategies": ["Full!"]})
