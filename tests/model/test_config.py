"""ModelConfig and presets: validation names the field, canonical JSON round trip, every preset builds."""

from __future__ import annotations

import dataclasses
import json

import pytest

from looplab.model.config import ModelConfig, RoundConfig
from looplab.model.errors import ConfigError
from looplab.model.presets import RECIPES, SIZES, WINDOWS, preset


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_preset_round_trips_through_json(recipe, size):
    cfg = preset(recipe, size)
    back = ModelConfig.from_json(cfg.to_json())
    assert back == cfg
    assert back.to_json() == cfg.to_json()
    assert json.loads(cfg.to_json()) == cfg.to_dict()
    assert all(isinstance(r, RoundConfig) for r in back.rounds)


def test_round_settings_repeat_the_last_entry():
    cfg = preset("lean", "86m")
    assert cfg.round(0).window is None
    assert [cfg.round(r).window for r in (1, 2, 3, 30)] == [64, 64, 64, 64]
    assert preset("lean", "tiny").round(1).window == WINDOWS["tiny"][0] < preset("lean", "tiny").seq_len
    assert (
        preset("half_width", "144m").round_heads(1) == 3 and preset("half_width", "144m").round_heads(0) == 6
    )


def test_overrides_and_unknown_override():
    cfg = preset("lean", "tiny", vocab_size=300, rounds=[{"window": 8}, {"window": 4}])
    assert cfg.vocab_size == 300 and cfg.rounds == (RoundConfig(window=8), RoundConfig(window=4))
    with pytest.raises(ConfigError, match="vocab"):
        preset("lean", "tiny", vocabsize=3)
    with pytest.raises(ConfigError, match="recipe.*accepted"):
        preset("leen", "tiny")
    with pytest.raises(ConfigError, match="size.*accepted"):
        preset("lean", "huge")


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(n_heads=3), "head_dim"),
        (dict(loop_sampler="uniform"), "loop_sampler"),
        (dict(grad_rounds=0), "grad_rounds"),
        (dict(loops=0), "loops"),
        (dict(injection="adds"), "injection"),
        (dict(value_embeds=[0, 9]), "value_embeds"),
        (dict(rounds=[{"window": 0}]), "window"),
        (dict(rounds=[{"width": 1.5}]), "width"),
        (dict(rounds=[{"width": 0.3}]), "width"),
        (dict(rounds=[{"reuse_kv": True}]), "reuse_kv"),
        (dict(rounds=[{}, {"reuse_kv": True, "attention": False}]), "reuse_kv"),
        (dict(rounds=[{"window": 8}, {"reuse_kv": True}]), "window"),
        (dict(rounds=[{"windw": 8}]), "windw"),
        (dict(rounds=[]), "rounds"),
        (dict(d_model="64"), "d_model"),
        (dict(tie_embeddings=1), "tie_embeddings"),
        (dict(h0_std=0.0), "h0_std"),
        (dict(h0_std="small"), "h0_std"),
        (dict(init_decay=1.0), "init_decay"),
    ],
)
def test_bad_settings_name_the_field(change, field):
    good = preset("fixed4", "tiny").to_dict()
    with pytest.raises(ConfigError, match=field):
        ModelConfig.from_dict({**good, **change})


def test_unknown_key_and_replace_are_validated():
    with pytest.raises(ConfigError, match="bogus"):
        ModelConfig.from_dict({**preset("lean", "tiny").to_dict(), "bogus": 1})
    with pytest.raises(ConfigError, match="grad_rounds"):
        dataclasses.replace(preset("parcae", "tiny"), grad_rounds=-1)
    assert dataclasses.replace(preset("parcae", "tiny"), vocab_size=999).vocab_size == 999


def test_value_embeds_every_second_layer_ending_at_the_last():
    assert preset("parcae", "144m").value_embed_layers() == (1, 3, 5)
    assert ModelConfig(value_embeds=[4, 0]).value_embed_layers() == (0, 4)
    assert ModelConfig(value_embeds="none").value_embed_layers() == ()


def test_h0_std_none_means_the_width_formula_and_an_explicit_value_round_trips():
    cfg = preset("parcae", "tiny")
    assert cfg.h0_std is None and cfg.to_dict()["h0_std"] is None
    old = ModelConfig.from_dict({**cfg.to_dict(), "h0_std": 0.023})  # configs stored before the change
    assert old.initial_state_std == 0.023 and ModelConfig.from_json(old.to_json()) == old
