"""Named starting points: `preset(recipe, size, **overrides) -> ModelConfig`.

A recipe fixes the looping (sampler, loop count, rounds with gradient, per-round settings of the
recurrent block); a size fixes the width, vocabulary and sequence length. Any `ModelConfig` field can
be overridden; an unknown name is a `ConfigError`.

Windows at small sizes: the study's windows (64 and 256 tokens) are as long as the tiny/small
sequences, where they would not restrict anything. So the window scales with the size:
tiny (seq 64): 16 / 32, small (seq 256): 32 / 128, 86m and 144m (seq 2048): 64 / 256.

Parameter counts (from `model.counts.param_count`, tied embeddings, vocab 32768, value embeddings on
distinct layers 1, 3, 5, the injection with its learnable prelude-output norm): 86m = 86,516,096
total / 19,407,232 non-embedding; 144m = 144,323,136 / 43,659,840 (the reference Parcae-small-140m
has 144,323,136 too). `plain` has no injection: 2 d^2 + 3 d fewer.
"""

from __future__ import annotations

import dataclasses

from model.config import FULL_ROUND, ModelConfig, RoundConfig
from model.errors import ConfigError

SIZES: dict[str, dict] = {
    "tiny": dict(vocab_size=256, d_model=64, n_heads=2, head_dim=32, seq_len=64),
    "small": dict(vocab_size=512, d_model=128, n_heads=2, head_dim=64, seq_len=256),
    "86m": dict(vocab_size=32768, d_model=512, n_heads=4, head_dim=128, seq_len=2048),
    "144m": dict(vocab_size=32768, d_model=768, n_heads=6, head_dim=128, seq_len=2048),
}

# (short window "64", long window "256") per size; see the module docstring.
WINDOWS: dict[str, tuple[int, int]] = {
    "tiny": (16, 32),
    "small": (32, 128),
    "86m": (64, 256),
    "144m": (64, 256),
}


def _recipe(name: str, w64: int, w256: int) -> dict:
    parcae = dict(loop_sampler="poisson_seq", loops=8, grad_rounds=4, rounds=(FULL_ROUND,))

    def fixed(n: int, later: RoundConfig = FULL_ROUND, grad: int | None = None) -> dict:
        return dict(loop_sampler="fixed", loops=n, grad_rounds=grad, rounds=(FULL_ROUND, later))

    table = {
        "parcae": parcae,
        "parcae_per_batch": {**parcae, "loop_sampler": "poisson_batch"},
        "parcae_last1": {**parcae, "grad_rounds": 1},
        "fixed2": fixed(2),
        "fixed4": fixed(4),
        "fixed8": fixed(8),
        "fixed6_grad3": fixed(6, grad=3),
        "lean": fixed(4, RoundConfig(window=w64)),
        "lean_w256": fixed(4, RoundConfig(window=w256)),
        "lean_all64": {**fixed(4), "rounds": (RoundConfig(window=w64),)},
        "half_width": fixed(4, RoundConfig(width=0.5)),
        "mlp_only": fixed(4, RoundConfig(attention=False)),
        "reuse_kv": fixed(4, RoundConfig(reuse_kv=True)),
        "plain": dict(
            loop_sampler="fixed", loops=1, grad_rounds=None, injection="none", rounds=(FULL_ROUND,)
        ),
    }
    return table[name]


RECIPES: tuple[str, ...] = (
    "parcae",
    "parcae_per_batch",
    "parcae_last1",
    "fixed2",
    "fixed4",
    "fixed8",
    "fixed6_grad3",
    "lean",
    "lean_w256",
    "lean_all64",
    "half_width",
    "mlp_only",
    "reuse_kv",
    "plain",
)


def preset(recipe: str, size: str = "tiny", **overrides) -> ModelConfig:
    """The config of `recipe` at `size`, with any ModelConfig field overridden."""
    if recipe not in RECIPES:
        raise ConfigError(f"recipe: unknown {recipe!r}; accepted: {', '.join(RECIPES)}")
    if size not in SIZES:
        raise ConfigError(f"size: unknown {size!r}; accepted: {', '.join(SIZES)}")
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    for k in overrides:
        if k not in known:
            raise ConfigError(f"model: unknown key {k!r}; accepted: {', '.join(sorted(known))}")
    fields = {**SIZES[size], **_recipe(recipe, *WINDOWS[size]), **overrides}
    return ModelConfig(**fields)
