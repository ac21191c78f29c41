"""The MoR-style family (families/mor) against the model contract: conformance under both routers and
both KV strategies, the routers' losses and capacity schedule, per-token depths that follow the router,
and training with the router's loss through the train job, then a depth sweep."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from looplab.families.mor import factory
from looplab.families.mor.model import sequence_kv
from looplab.model.contract import FamilyError, check_family
from looplab.workers import jobs
from looplab.workers.reporter import MemoryReporter
from tests.workers.conftest import tiny_spec

NAME = "families.mor:factory"
TINY = {"vocab_size": 64, "seq_len": 16, "d_model": 32, "n_heads": 2, "mlp": 48}


def _batch(seed: int = 1, shape=(2, 12)):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 64, shape, generator=g), torch.randint(0, 64, shape, generator=g)


@pytest.mark.parametrize("router", ["expert", "token"])
@pytest.mark.parametrize("kv", ["recursion", "share_first"])
def test_the_family_meets_the_contract_under_both_routers_and_kv_strategies(router, kv):
    report = check_family(NAME, {**TINY, "router": router, "kv": kv}, loops=3)
    assert report.capabilities.training_loss and report.capabilities.param_split
    assert report.flops_measured and report.flops_per_token > 0 and not report.split_dependent


@pytest.mark.parametrize(
    ("given", "field"),
    [({"router": "topk"}, "router"), ({"kv": "latest"}, "kv"), ({"n_shared": 0}, "n_shared"),
     ({"aux_coef": -1.0}, "aux_coef"), ({"depth": 2}, "depth")],
)  # fmt: skip
def test_a_bad_config_is_refused_naming_the_field(given, field):
    with pytest.raises(FamilyError, match=f"family_config: {field}"):
        check_family(NAME, {**TINY, **given})


def test_expert_choice_trains_the_top_share_by_the_capacity_schedule_with_its_auxiliary_loss():
    torch.manual_seed(0)
    model = factory({**TINY, "aux_coef": 1.0}).train()
    idx, targets = _batch()
    routed = model.routed(idx, 4)
    # shares 1, 3/4, 2/4, 1/4 of 12 tokens per row, nested: depths 1..4 with 12, 9, 6, 3 tokens reaching each
    for row in routed.depths:
        assert sorted(row.tolist()) == [1] * 3 + [2] * 3 + [3] * 3 + [4] * 3
    out = model.training_loss(idx, targets, loops=4)
    ce = F.cross_entropy(out.logits.reshape(-1, 64), targets.reshape(-1))
    torch.testing.assert_close(out.loss, ce + routed.router_loss)
    assert routed.router_loss > 0
    model.eval()  # in evaluation each token's depth is its router's own (sigmoid > 0.5): no top-k
    with torch.no_grad():
        first = model.token_depths(idx[:, :6], 4)
        assert torch.equal(first, model.token_depths(idx, 4)[:, :6])  # causal: later tokens do not move it


def test_token_choice_gives_each_token_its_routers_depth_and_a_balancing_loss():
    torch.manual_seed(0)
    model = factory({**TINY, "router": "token", "balance_coef": 1.0})
    idx, _ = _batch()
    routed = model.routed(idx, 3)
    h, _ = model.first(model.embed(idx), model_rot(model, idx.shape[1]), sequence_kv())
    probs = torch.softmax(model.routers[0](h).float()[..., :3], -1)
    assert torch.equal(routed.depths, probs.argmax(-1) + 1)
    share = F.one_hot(probs.argmax(-1), 3).float().mean((0, 1))
    torch.testing.assert_close(routed.router_loss, 3 * (share * probs.mean((0, 1))).sum())


def model_rot(model, T: int):
    from looplab.model.family_parts import rope_tables

    return rope_tables(torch.arange(T), model.cfg.head_dim, model.cfg.rope_base, torch.float32)


def test_kv_sharing_changes_the_function_past_the_first_recursion():
    torch.manual_seed(0)
    own = factory({**TINY, "router": "token"}).eval()
    shared = factory({**TINY, "router": "token", "kv": "share_first"}).eval()
    shared.load_state_dict(own.state_dict())
    idx, _ = _batch()
    with torch.no_grad():
        assert torch.equal(own(idx, loops=1), shared(idx, loops=1))
        assert not torch.allclose(own(idx, loops=3), shared(idx, loops=3))


@pytest.mark.parametrize("router", ["expert", "token"])
def test_both_routers_train_through_the_train_job_and_sweep_their_depth(router, tmp_path, looplab_cache):
    family = {"family": NAME, "family_config": {"d_model": 32, "n_heads": 2, "mlp": 48, "router": router}}
    spec = tiny_spec(**family, optimizer="adamw", model={"loops": 3}, tokens=8 * 32 * 16, log_every=4)
    rep = MemoryReporter()
    train = jobs.run("train", jobs.validate("train", spec), rep, tmp_path / "train")
    losses = [m["value"] for m in rep.of("metric") if m["key"] == "train_loss"]
    assert losses[-1] < losses[0] and train["final_val_loss"] < math.log(256)
    depths = [m["value"] for m in rep.of("metric") if m["key"] == "gate_expected_rounds"]
    assert depths and all(1 <= d <= 3 for d in depths)  # each step's mean per-token recursion depth
    sweep = {"checkpoint": str(tmp_path / "train"), "loops": [1, 3], "eval_tokens": 512}
    out = jobs.run("depth_sweep", jobs.validate("depth_sweep", sweep), MemoryReporter(), tmp_path / "sweep")
    assert [e["loops"] for e in out["depth_evals"]] == [1, 3]


@pytest.mark.parametrize("router", ["expert", "token"])
@pytest.mark.parametrize("kv", ["recursion", "share_first"])
def test_the_cache_decodes_what_the_forward_computes_with_per_token_depths(router, kv):
    """In evaluation each token's depth is decided token by token, so a prompt prefilled and the rest
    decoded one token at a time through the cache (a recursion's slot holding only the tokens it ran,
    or the first recursion's shared) gives the forward's logits."""
    torch.manual_seed(0)
    model = factory({**TINY, "router": router, "kv": kv}).eval()
    idx, _ = _batch(3, (2, 10))
    with torch.no_grad():
        want, depths = model(idx, loops=3), model.token_depths(idx, 3)
    assert len(set(depths.flatten().tolist())) > 1  # the tokens' depths differ
    cache = model.setup_cache(2, 10, loops=3)
    got = [model.prefill(idx[:, :4], cache)] + [
        model.decode_step(idx[:, t], cache)[:, None] for t in range(4, 10)
    ]
    torch.testing.assert_close(torch.cat(got, 1), want, rtol=1e-5, atol=1e-5)
    assert cache.nbytes() == model.kv_cache_bytes(2, 10, loops=3)
    slots = 2 + (3 if kv == "recursion" else 1)  # first, last, and the recursions' (n_shared = 1)
    assert cache.nbytes() == slots * 2 * 10 * (2 * 32 * 4 + 1)  # K and V fp32, and the held mask


@pytest.mark.parametrize("kv", ["recursion", "share_first"])
def test_the_decode_bench_measures_each_kv_strategys_cache(kv, tmp_path, looplab_cache):
    family = {"family": NAME, "family_config": {"d_model": 32, "n_heads": 2, "mlp": 48, "kv": kv}}
    spec = tiny_spec(**family, model={"loops": 3})
    arch = {k: spec[k] for k in ("recipe", "size", "model", "family", "family_config")}
    bench = jobs.validate("decode_bench", {**arch, "context_lens": [48], "batch_sizes": [1], "steps": 2})
    (row,) = jobs.run("decode_bench", bench, MemoryReporter(), tmp_path / "bench")["rows"]
    model = factory({**family["family_config"], "vocab_size": 256, "seq_len": 32})
    assert "recompute" not in row["arch"] and row["kv_cache_mb"] * 2**20 == model.kv_cache_bytes(1, 48)
