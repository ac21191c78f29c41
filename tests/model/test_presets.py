"""The iso-depth family: effective depth 20 for every recurrence r dividing 16, r = 1 an ordinary
20-layer transformer, training FLOPs per token (almost) equal across r while the parameters fall,
bad arguments named, and a tiny member that trains on CPU."""

from __future__ import annotations

import pytest
import torch

from looplab.families.looped.model import LoopedLM
from looplab.model.counts import arch_summary, once_and_recurrent_params
from looplab.model.errors import ConfigError
from looplab.model.presets import RECIPES, iso_depth, iso_depth_overrides, preset


@pytest.mark.parametrize("r", [1, 2, 4, 8, 16])
def test_every_member_has_effective_depth_20_and_loops_every_round_with_gradient(r):
    cfg = iso_depth(r, 64)
    assert (cfg.n_prelude, cfg.n_recurrent, cfg.n_coda, cfg.loops) == (2, 16 // r, 2, r)
    assert arch_summary(cfg, 4)["effective_depth"] == 20.0
    assert cfg.loop_sampler == "fixed" and cfg.grad_rounds is None and len(cfg.rounds) == 1
    assert cfg.injection == ("none" if r == 1 else "diagonal")
    assert cfg.value_embeds == "none"


def test_r1_is_the_recipe_and_an_ordinary_20_layer_transformer():
    assert "iso_depth" in RECIPES
    assert iso_depth(1) == preset("iso_depth", "tiny")
    model = LoopedLM(iso_depth(1, 32, head_dim=16))
    assert len(model.blocks()) == 20 and model.cfg.loops == 1 and model.cfg.injection == "none"


def test_compute_is_equal_across_r_while_parameters_fall():
    per_token = {r: arch_summary(iso_depth(r, 128), 8)["flops_per_token"] for r in (1, 2, 4, 8)}
    rec = {r: once_and_recurrent_params(iso_depth(r, 128))["n_rec"] for r in (1, 2, 4, 8)}
    # looped members are equal (same layer applications); r = 1 lacks only the injection's 2 d^2 matmuls
    assert per_token[2] == per_token[4] == per_token[8]
    assert 0 < per_token[2] - per_token[1] < 0.01 * per_token[1]
    assert rec[1] == 2 * rec[2] == 4 * rec[4] == 8 * rec[8]


def test_width_injection_and_recurrent_depth_are_parameters():
    cfg = iso_depth(4, 96, injection="none", head_dim=16)
    assert (cfg.d_model, cfg.n_heads, cfg.head_dim, cfg.injection) == (96, 6, 16, "none")
    deeper = iso_depth(4, recurrent_depth=24)
    assert (deeper.n_recurrent, deeper.loops) == (6, 4)
    assert iso_depth(2, 64, mlp_ratio=2).mlp_ratio == 2  # any other field overrides
    assert iso_depth_overrides(8, 64) == {
        "n_recurrent": 2,
        "loops": 8,
        "injection": "diagonal",
        "d_model": 64,
        "n_heads": 2,
        "head_dim": 32,
    }


@pytest.mark.parametrize(
    "args,kwargs,message",
    [
        (
            (3,),
            {},
            "r: must divide the recurrent depth 16 (the shared block is 16/r layers); accepted: 1, 2, 4, 8, 16",
        ),
        ((0,), {}, "r: must be >= 1"),
        ((4,), {"recurrent_depth": 6}, "r: must divide the recurrent depth 6"),
        ((2, 50), {}, "d_model: must be a multiple of head_dim 32"),
        ((2,), {"injection": "dense"}, "injection: unknown 'dense'"),
        ((2,), {"size": "huge"}, "size: unknown 'huge'"),
        ((2,), {"loops": 3}, "loops: set by the iso-depth family"),
        ((2,), {"vocab_sise": 3}, "model: unknown key 'vocab_sise'"),
    ],
)
def test_bad_arguments_name_the_field(args, kwargs, message):
    with pytest.raises(ConfigError) as e:
        iso_depth(*args, **kwargs)
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize("r", [1, 4])
def test_a_tiny_member_trains_on_cpu(r):
    torch.manual_seed(0)
    model = LoopedLM(iso_depth(r, 32, head_dim=16, seq_len=16))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    idx = torch.randint(0, 256, (4, 17), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(15):  # one fixed batch: the loss must fall when every layer gets gradient
        out = model(idx[:, :-1], targets=idx[:, 1:], h0_seed=0)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    assert losses[-1] < losses[0] - 0.5
    assert all(p.grad is not None for p in model.recurrent.parameters())
