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

The iso-depth family (`iso_depth(r, d_model)`, recipe "iso_depth"): effective depth 20 = 2 prelude +
(16/r shared layers x r loops) + 2 coda for a recurrence r dividing 16, a fixed loop count, every round
with gradient, so training FLOPs per token are (almost) equal across r while the parameters fall with r.
The recipe itself is the r = 1 member, an ordinary 20-layer transformer (one round has nothing to inject
between, so no injection). The family has no value embeddings: their tables are one per distinct layer,
so they would grow with 16/r and give the r = 1 models capacity that N_once and N_rec do not count.

The loop-design layouts (`loop_layout(layout, shared, loops)`, recipes "base_loop", "core_loop",
"non_loop"): a fixed loop count with gradient through every round, no value embeddings (for the same
reason as the iso-depth family: NonLoop's 8 distinct layers would carry 4 tables to BaseLoop 2x4's 1,
capacity that the layout comparison must not include), one round setting.
- base_loop: the whole stack is the loop, `shared` layers x `loops`, no prelude or coda, injection
  "none" (default 2 x 4);
- core_loop: `prelude` layers, `shared` layers x `loops`, `coda` layers, injection "diagonal"
  (default 2 + 2 x 4 + 2);
- non_loop: `shared` distinct layers run once (loops = 1), no prelude or coda, injection "none"
  (default 8): BaseLoop k x n's effective depth with k n distinct layers.
The three recipes differ only in the keys `loop_layout_overrides` sets, so any of them plus those
overrides is that layout; a grid sweeps them as model.* keys, and the injection / history / timestep
variants are further model.* keys on top.
"""

from __future__ import annotations

from looplab.model import fields
from looplab.model.config import FULL_ROUND, ModelConfig, RoundConfig
from looplab.model.errors import ConfigError

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


# The iso-depth family's recipe (the studies, the law fit and the report select its runs by it), its
# prelude and coda layers each, and its recurrent-layer applications per token.
ISO_DEPTH_RECIPE = "iso_depth"
ISO_DEPTH_OUTER = 2
ISO_DEPTH_RECURRENT = 16
ISO_DEPTH_INJECTIONS = ("diagonal", "none")

# The loop-design layouts and the injection each starts with.
LOOP_LAYOUTS = ("base_loop", "core_loop", "non_loop")
LAYOUT_INJECTION = {"base_loop": "none", "core_loop": "diagonal", "non_loop": "none"}


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
        # the r = 1 member; iso_depth(r, ...) sets the others
        ISO_DEPTH_RECIPE: {
            **dict(loop_sampler="fixed", loops=1, grad_rounds=None, injection="none", rounds=(FULL_ROUND,)),
            **dict(n_prelude=ISO_DEPTH_OUTER, n_recurrent=ISO_DEPTH_RECURRENT, n_coda=ISO_DEPTH_OUTER),
            "value_embeds": "none",
        },
        **{layout: _layout_recipe(layout) for layout in LOOP_LAYOUTS},
    }
    return table[name]


def _layout_recipe(layout: str) -> dict:
    """The loop-design recipe `layout` at its default shape (see the module docstring)."""
    shape = {"base_loop": (2, 4, 0, 0), "core_loop": (2, 4, 2, 2), "non_loop": (8, 1, 0, 0)}[layout]
    fixed = dict(loop_sampler="fixed", grad_rounds=None, rounds=(FULL_ROUND,), value_embeds="none")
    return {**fixed, **loop_layout_overrides(layout, shape[0], shape[1], prelude=shape[2], coda=shape[3])}


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
    ISO_DEPTH_RECIPE,
    *LOOP_LAYOUTS,
)


def preset(recipe: str, size: str = "tiny", **overrides) -> ModelConfig:
    """The config of `recipe` at `size`, with any ModelConfig field overridden."""
    if recipe not in RECIPES:
        fields.choice("recipe", recipe, list(RECIPES))
    if size not in SIZES:
        fields.choice("size", size, list(SIZES))
    fields.known_keys("model", overrides, ModelConfig)
    values = {**SIZES[size], **_recipe(recipe, *WINDOWS[size]), **overrides}
    return ModelConfig(**values)


def iso_depth_overrides(
    r: int,
    d_model: int | None = None,
    injection: str = "diagonal",
    size: str = "tiny",
    head_dim: int | None = None,
    recurrent_depth: int = ISO_DEPTH_RECURRENT,
) -> dict:
    """The `model` overrides of recipe "iso_depth" that make its member of recurrence `r`:
    n_recurrent = recurrent_depth / r shared layers run `loops` = r times, at width `d_model` (default:
    the size's) split into heads of `head_dim` (default: the size's). `injection` is the looped members'
    (r > 1); r = 1 is an ordinary transformer and has none. A grid sweeps these as model.* keys."""
    if size not in SIZES:
        raise ConfigError(f"size: unknown {size!r}; accepted: {', '.join(SIZES)}")
    depth = fields.integer("recurrent_depth", recurrent_depth, lo=1)
    r = fields.integer("r", r, lo=1)
    if depth % r:
        divisors = [n for n in range(1, depth + 1) if depth % n == 0]
        raise ConfigError(
            f"r: must divide the recurrent depth {depth} (the shared block is {depth}/r layers); "
            f"accepted: {', '.join(map(str, divisors))}; got {r}"
        )
    injection = fields.choice("injection", injection, ISO_DEPTH_INJECTIONS)
    width = fields.integer("d_model", SIZES[size]["d_model"] if d_model is None else d_model, lo=1)
    head = fields.integer("head_dim", SIZES[size]["head_dim"] if head_dim is None else head_dim, lo=2)
    if width % head:
        raise ConfigError(
            f"d_model: must be a multiple of head_dim {head} (whole attention heads); got {width}"
        )
    return {
        "n_recurrent": depth // r,
        "loops": r,
        "injection": injection if r > 1 else "none",
        "d_model": width,
        "n_heads": width // head,
        "head_dim": head,
    }


def iso_depth(r: int, d_model: int | None = None, size: str = "tiny", **overrides) -> ModelConfig:
    """The iso-depth member of recurrence `r` (see `iso_depth_overrides`, which also takes `injection`,
    `head_dim` and `recurrent_depth`), with any other ModelConfig field overridden: `iso_depth(4, 128)`
    is 2 + (4 shared layers x 4 loops) + 2 at width 128."""
    family_args = {
        k: overrides.pop(k) for k in ("injection", "head_dim", "recurrent_depth") if k in overrides
    }
    family = iso_depth_overrides(r, d_model, size=size, **family_args)
    clash = sorted(set(family) & set(overrides))
    if clash:
        raise ConfigError(
            f"{clash[0]}: set by the iso-depth family (from r, d_model, injection, head_dim); "
            "give it through those arguments"
        )
    return preset(ISO_DEPTH_RECIPE, size, **family, **overrides)


def loop_layout_overrides(
    layout: str, shared: int, loops: int, size: str = "tiny", prelude: int = 2, coda: int = 2
) -> dict:
    """The `model` overrides that make loop-design layout `layout` (base_loop | core_loop | non_loop):
    n_prelude, n_recurrent = `shared`, n_coda, `loops` and the layout's injection. `prelude` and `coda`
    apply to core_loop only (the others have none); for non_loop `shared` is the number of distinct
    layers and `loops` must be 1. `size` is checked for the family's signature (the layout does not
    depend on it). A grid sweeps these as model.* keys; an injection variant overrides `injection`."""
    layout = fields.choice("layout", layout, LOOP_LAYOUTS)
    if size not in SIZES:
        raise ConfigError(f"size: unknown {size!r}; accepted: {', '.join(SIZES)}")
    shared = fields.integer("shared", shared, lo=1)
    loops = fields.integer("loops", loops, lo=1)
    if layout == "non_loop" and loops != 1:
        raise ConfigError(f"loops: non_loop runs every layer once; accepted: 1; got {loops}")
    outer = (fields.integer("prelude", prelude, lo=0), fields.integer("coda", coda, lo=0))
    if layout != "core_loop":
        outer = (0, 0)
    return {
        "n_prelude": outer[0],
        "n_recurrent": shared,
        "n_coda": outer[1],
        "loops": loops,
        "injection": LAYOUT_INJECTION[layout],
    }


_LAYOUT_KEYS = ("n_prelude", "n_recurrent", "n_coda", "loops")


def loop_layout(layout: str, shared: int, loops: int, size: str = "tiny", **overrides) -> ModelConfig:
    """The loop-design layout `layout` with `shared` layers x `loops` (see `loop_layout_overrides`,
    which also takes `prelude` and `coda`), with any other ModelConfig field overridden, the injection
    included: `loop_layout("base_loop", 4, 2, injection="scalar", timestep="loop_gate")`."""
    outer = {k: overrides.pop(k) for k in ("prelude", "coda") if k in overrides}
    layout_keys = loop_layout_overrides(layout, shared, loops, size=size, **outer)
    clash = sorted(set(_LAYOUT_KEYS) & set(overrides))
    if clash:
        raise ConfigError(
            f"{clash[0]}: set by the loop layout (from layout, shared, loops, prelude, coda); "
            "give it through those arguments"
        )
    return preset(layout, size, **{**layout_keys, **overrides})
