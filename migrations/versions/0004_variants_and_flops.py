"""Jobs know their variant and resolved architecture; train results their FLOPs; the views show both.

Revision ID: 0004_variants_and_flops
Revises: 0003_job_state_columns
Create Date: 2026-12-13

- `jobs`: `variant_id`, `variant_label` (recipe + size + the model overrides that differ from the
  preset; see orchestrator/variants.py), the resolved architecture (`n_prelude`, `n_recurrent`,
  `n_coda`, `effective_depth`, `d_model`, `injection`, `n_params`, `n_once`, `n_rec`), the training
  `flops_per_token`, and `budget_flops` (a budget given in FLOPs); an index on `variant_id`.
- `train_results`: `flops_per_token`, `train_flops`, `achieved_flops_per_s`, `mfu`, `padding_waste`.
- The views (orchestrator/views.py, re-created after every upgrade to head: see migrations/env.py)
  show the variant and architecture columns.

The back-fill of existing train and decode-bench rows (a depth sweep copies its train job's) derives
the columns from each row's stored config as the code of this revision did (orchestrator/variants.py
with model/presets.py, model/config.py, model/counts.py, model/flops.py and the train Spec of
workers/train_spec.py, as they were): that derivation is frozen below, not imported, so the revision
does the same thing whatever the model code becomes later (like 0003's recipe table), and a row it
back-fills agrees with the rows submitted when it was written. Only the recipes, sizes and ModelConfig
fields of this revision are known; a config that does not resolve keeps NULLs; `loop_sampler`/`loops`
are filled only where they are NULL (revision 0003 filled the others). tests/db/test_migrations.py
checks the frozen copy against today's code on the configs of its time.

Downgrade drops the index and the columns.
"""

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0004_variants_and_flops"
down_revision: str | Sequence[str] | None = "0003_job_state_columns"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_COLUMNS = dict(
    variant_id=sa.String(length=16),
    variant_label=sa.String(length=200),
    n_prelude=sa.Integer(),
    n_recurrent=sa.Integer(),
    n_coda=sa.Integer(),
    effective_depth=sa.Float(),
    d_model=sa.Integer(),
    injection=sa.String(length=16),
    n_params=sa.Integer(),
    n_once=sa.Integer(),
    n_rec=sa.Integer(),
    flops_per_token=sa.Float(),
    budget_flops=sa.Float(),
)
RESULT_COLUMNS = dict(
    flops_per_token=sa.Float(),
    train_flops=sa.Float(),
    achieved_flops_per_s=sa.Float(),
    mfu=sa.Float(),
    padding_waste=sa.Float(),
)
# What the back-fill writes: the variant and architecture columns of orchestrator.variants, as of
# this revision (a later revision that adds one back-fills it itself).
BACKFILLED = (
    "variant_id",
    "variant_label",
    "n_prelude",
    "n_recurrent",
    "n_coda",
    "effective_depth",
    "d_model",
    "injection",
    "n_params",
    "n_once",
    "n_rec",
    "flops_per_token",
)
LOOP_COLUMNS = ("loop_sampler", "loops")

# untyped columns are enough to read configs and write plain values
jobs = sa.table("jobs", *(sa.column(c) for c in ("id", "kind", "config", *LOOP_COLUMNS, *JOB_COLUMNS)))
job_deps = sa.table("job_deps", sa.column("job_id", sa.Integer), sa.column("depends_on", sa.Integer))


def upgrade() -> None:
    for name, type_ in JOB_COLUMNS.items():
        op.add_column("jobs", sa.Column(name, type_, nullable=True))
    for name, type_ in RESULT_COLUMNS.items():
        op.add_column("train_results", sa.Column(name, type_, nullable=True))
    op.create_index("ix_jobs_variant_id", "jobs", ["variant_id"], unique=False)
    _backfill(op.get_bind())


def downgrade() -> None:
    op.drop_index("ix_jobs_variant_id", table_name="jobs")
    for name in reversed(RESULT_COLUMNS):
        op.drop_column("train_results", name)
    for name in reversed(JOB_COLUMNS):
        op.drop_column("jobs", name)


def _backfill(conn: sa.Connection) -> None:
    rows = conn.execute(
        sa.select(jobs.c.id, jobs.c.kind, jobs.c.config, jobs.c.loop_sampler, jobs.c.loops).where(
            jobs.c.kind.in_(("train", "decode_bench"))
        )
    ).all()
    by_job: dict[int, dict] = {}
    for job_id, kind, config, sampler, loops in rows:
        try:
            spec = json.loads(config or "")
            columns = variant_columns(kind, spec) if isinstance(spec, dict) else {}
        except (ValueError, TypeError):  # unreadable, or a config of the time failed on it: NULLs
            columns = {}
        if columns:
            by_job[job_id] = columns
            _write(conn, job_id, columns, sampler is None and loops is None)
    sweeps = conn.execute(
        sa.select(job_deps.c.job_id, job_deps.c.depends_on, jobs.c.loop_sampler, jobs.c.loops)
        .join(jobs, jobs.c.id == job_deps.c.job_id)
        .where(jobs.c.kind == "depth_sweep")
    ).all()
    for sweep_id, train_id, sampler, loops in sweeps:
        if train_id in by_job:
            _write(conn, sweep_id, by_job[train_id], sampler is None and loops is None)


def _write(conn: sa.Connection, job_id: int, columns: dict, with_loops: bool) -> None:
    names = BACKFILLED + (LOOP_COLUMNS if with_loops else ())
    conn.execute(jobs.update().where(jobs.c.id == job_id).values({c: columns.get(c) for c in names}))


# ---------------------------------------------------------------- the derivation, frozen at this revision
# A copy of what `orchestrator.variants.variant_columns` computed when this revision was written (its
# model code included), reduced to what the back-fill needs. A ModelConfig is a dict of its normalised
# field values here, a RoundConfig a dict of its four fields. Do not "fix" it to follow later code.


class Unresolved(ValueError):
    """The config does not resolve (a ConfigError of the time): its row keeps NULLs."""


# orchestrator/variants.py
VARIANT_ID_HEX = 12
LABEL_MAX = 200
LABEL_SEPARATOR = " · "
MODEL_KINDS = ("train", "decode_bench")

# model/presets.py
SIZES: dict[str, dict] = {
    "tiny": dict(vocab_size=256, d_model=64, n_heads=2, head_dim=32, seq_len=64),
    "small": dict(vocab_size=512, d_model=128, n_heads=2, head_dim=64, seq_len=256),
    "86m": dict(vocab_size=32768, d_model=512, n_heads=4, head_dim=128, seq_len=2048),
    "144m": dict(vocab_size=32768, d_model=768, n_heads=6, head_dim=128, seq_len=2048),
}
WINDOWS: dict[str, tuple[int, int]] = {
    "tiny": (16, 32),
    "small": (32, 128),
    "86m": (64, 256),
    "144m": (64, 256),
}
RECIPES = (
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

# model/config.py
FULL_ROUND = {"window": None, "width": 1.0, "attention": True, "reuse_kv": False}
MODEL_DEFAULTS: dict[str, Any] = dict(
    vocab_size=256,
    d_model=64,
    n_heads=2,
    head_dim=32,
    mlp_ratio=4,
    n_prelude=2,
    n_recurrent=2,
    n_coda=2,
    value_embeds="alternate",
    rope_base=50000.0,
    seq_len=64,
    tie_embeddings=True,
    injection="diagonal",
    loop_sampler="fixed",
    loops=4,
    grad_rounds=None,
    rounds=(FULL_ROUND,),
    h0_std=None,
    init_decay=math.sqrt(1.0 / 5.0),
)
SAMPLERS = ("fixed", "poisson_seq", "poisson_batch")
INJECTIONS = ("diagonal", "none")
VALUE_EMBED_RULES = ("alternate", "none", "all")
VE_GATE_CHANNELS = 32  # model/layers.py

# workers/train_spec.py and workers/data.py: the train Spec's fields, and what its validation checked
TRAIN_KEYS = (
    "recipe",
    "size",
    "model",
    "seed",
    "tokens",
    "time_s",
    "flops",
    "batch_size",
    "seq_len",
    "lr",
    "adam_lr",
    "optimizer",
    "weight_decay",
    "warmup_steps",
    "cooldown_frac",
    "grad_clip",
    "eval_every",
    "eval_tokens",
    "eval_loops",
    "ckpt_every",
    "ckpt_minutes",
    "log_every",
    "calib_steps",
    "compile",
    "device",
    "data",
)
TRAIN_BATCH_SIZE = 8
OPTIMIZERS = ("parcae", "torch_muon", "adamw")
DATA_DEFAULTS = {"corpus": "offline", "tokenizer": "byte", "vocab_size": 512}
LOCAL_EXTS = (".txt", ".jsonl", ".json", ".parquet")

# model/attention.py (the CPU block-local layout the FLOP count follows) and model/flops.py
CPU_BLOCK_MIN = 32
BACKWARD_FACTOR = 2.0
TAIL = 1e-15


# ---- model/fields.py: the checks, each returning the normalised value


def _integer(v: Any, lo: int | None = None, hi: int | None = None, allow_none: bool = False) -> int | None:
    if v is None and allow_none:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if (
        isinstance(v, bool)
        or not isinstance(v, int)
        or (lo is not None and v < lo)
        or (hi is not None and v > hi)
    ):
        raise Unresolved(v)
    return v


def _number(
    v: Any,
    lo: float | None = None,
    lo_open: bool = False,
    hi: float | None = None,
    hi_open: bool = False,
    allow_none: bool = False,
) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != v:
        raise Unresolved(v)
    v = float(v)
    if (
        lo is not None
        and (v <= lo if lo_open else v < lo)
        or hi is not None
        and (v >= hi if hi_open else v > hi)
    ):
        raise Unresolved(v)
    return v


def _choice(v: Any, accepted: Sequence[str]) -> str:
    if not isinstance(v, str) or v not in accepted:
        raise Unresolved(v)
    return v


def _boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise Unresolved(v)
    return v


def _known_keys(d: Any, names: Sequence[str]) -> dict[str, Any]:
    if not isinstance(d, dict) or set(d) - set(names):
        raise Unresolved(d)
    return dict(d)


def _int_list(v: Any) -> list[int]:
    if not isinstance(v, list | tuple) or not v:
        raise Unresolved(v)
    return sorted({_integer(x, lo=1) for x in v})


def _device(v: Any) -> str:
    if not isinstance(v, str) or not (
        v in ("auto", "cpu", "cuda") or v.startswith("cuda:") and v[5:].isdigit()
    ):
        raise Unresolved(v)
    return v


# ---- model/config.py and model/presets.py


def _round_config(r: Any) -> dict[str, Any]:
    """RoundConfig.from_dict (a RoundConfig of the preset table is such a dict already)."""
    r = {**FULL_ROUND, **_known_keys(r, tuple(FULL_ROUND))}
    r = dict(
        window=_integer(r["window"], lo=1, allow_none=True),
        width=_number(r["width"], 0.0, True, 1.0),
        attention=_boolean(r["attention"]),
        reuse_kv=_boolean(r["reuse_kv"]),
    )
    if r["reuse_kv"] and not r["attention"]:
        raise Unresolved(r)
    return r


def _model_config(fields: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig(**fields): every field checked and normalised as its __post_init__ did."""
    c = {**MODEL_DEFAULTS, **fields}
    for name in ("vocab_size", "d_model", "n_heads", "head_dim", "mlp_ratio", "n_recurrent", "seq_len"):
        c[name] = _integer(c[name], lo=1)
    for name in ("n_prelude", "n_coda"):
        c[name] = _integer(c[name], lo=0)
    if c["n_heads"] * c["head_dim"] != c["d_model"] or c["head_dim"] % 2:
        raise Unresolved("head_dim")
    c["rope_base"] = _number(c["rope_base"], lo=0.0, lo_open=True)
    c["h0_std"] = _number(c["h0_std"], lo=0.0, lo_open=True, allow_none=True)
    c["init_decay"] = _number(c["init_decay"], lo=0.0, lo_open=True, hi=1.0, hi_open=True)
    _boolean(c["tie_embeddings"])
    _choice(c["injection"], INJECTIONS)
    _choice(c["loop_sampler"], SAMPLERS)
    c["loops"] = _integer(c["loops"], lo=1)
    c["grad_rounds"] = _integer(c["grad_rounds"], lo=1, allow_none=True)
    ve, n_layers = c["value_embeds"], c["n_prelude"] + c["n_recurrent"] + c["n_coda"]
    if isinstance(ve, str):
        _choice(ve, VALUE_EMBED_RULES)
    elif isinstance(ve, list | tuple):
        idx = tuple(_integer(i, lo=0) for i in ve)
        if any(i >= n_layers for i in idx) or len(set(idx)) != len(idx):
            raise Unresolved("value_embeds")
        c["value_embeds"] = tuple(sorted(idx))
    else:
        raise Unresolved("value_embeds")
    rs = c["rounds"]
    if not isinstance(rs, list | tuple) or not rs:
        raise Unresolved("rounds")
    rs = c["rounds"] = tuple(_round_config(r) for r in rs)
    first = rs[0]
    if first["reuse_kv"]:
        raise Unresolved("rounds")
    for r in rs:
        for n in (c["n_heads"], c["mlp_ratio"] * c["d_model"]):
            if abs(r["width"] * n - round(r["width"] * n)) > 1e-9 or round(r["width"] * n) < 1:
                raise Unresolved("rounds.width")
        if r["reuse_kv"] and (
            not first["attention"]
            or r["width"] > first["width"]
            or first["window"] is not None
            and (r["window"] is None or r["window"] > first["window"])
        ):
            raise Unresolved("rounds.reuse_kv")
    return c


def _recipe(name: str, w64: int, w256: int) -> dict[str, Any]:
    parcae = dict(loop_sampler="poisson_seq", loops=8, grad_rounds=4, rounds=(FULL_ROUND,))

    def fixed(n: int, later: dict = FULL_ROUND, grad: int | None = None) -> dict:
        return dict(loop_sampler="fixed", loops=n, grad_rounds=grad, rounds=(FULL_ROUND, later))

    table = {
        "parcae": parcae,
        "parcae_per_batch": {**parcae, "loop_sampler": "poisson_batch"},
        "parcae_last1": {**parcae, "grad_rounds": 1},
        "fixed2": fixed(2),
        "fixed4": fixed(4),
        "fixed8": fixed(8),
        "fixed6_grad3": fixed(6, grad=3),
        "lean": fixed(4, {**FULL_ROUND, "window": w64}),
        "lean_w256": fixed(4, {**FULL_ROUND, "window": w256}),
        "lean_all64": {**fixed(4), "rounds": ({**FULL_ROUND, "window": w64},)},
        "half_width": fixed(4, {**FULL_ROUND, "width": 0.5}),
        "mlp_only": fixed(4, {**FULL_ROUND, "attention": False}),
        "reuse_kv": fixed(4, {**FULL_ROUND, "reuse_kv": True}),
        "plain": dict(
            loop_sampler="fixed", loops=1, grad_rounds=None, injection="none", rounds=(FULL_ROUND,)
        ),
    }
    return table[name]


def preset(recipe: str, size: str = "tiny", **overrides: Any) -> dict[str, Any]:
    if recipe not in RECIPES or size not in SIZES or set(overrides) - set(MODEL_DEFAULTS):
        raise Unresolved(recipe)
    return _model_config({**SIZES[size], **_recipe(recipe, *WINDOWS[size]), **overrides})


def _round_settings(c: dict[str, Any], r: int) -> tuple[dict, int, int]:
    """(the RoundConfig, heads, hidden units) of round r (0-based): the last entry repeats."""
    rc = c["rounds"][min(r, len(c["rounds"]) - 1)]
    return rc, round(rc["width"] * c["n_heads"]), round(rc["width"] * c["mlp_ratio"] * c["d_model"])


def _value_embed_layers(c: dict[str, Any]) -> tuple[int, ...]:
    ve, n = c["value_embeds"], c["n_prelude"] + c["n_recurrent"] + c["n_coda"]
    if ve == "none":
        return ()
    if ve == "all":
        return tuple(range(n))
    if ve == "alternate":
        return tuple(i for i in range(n) if i % 2 == (n - 1) % 2)
    return tuple(ve)


# ---- workers/train_spec.py: what a train spec resolved to


def _data_vocab(data: Any) -> int | None:
    """DataSpec.from_dict + check, then the vocabulary: byte 256, bpe its vocab_size, a tokenizer.json
    its tokens (None when unreadable: the preset's). Unresolved where the Spec was refused."""
    d = {**DATA_DEFAULTS, **_known_keys({} if data is None else data, tuple(DATA_DEFAULTS))}
    corpus, tokenizer, vocab = d["corpus"], d["tokenizer"], _integer(d["vocab_size"], lo=257, hi=2**31)
    if not isinstance(corpus, str) or not corpus or not isinstance(tokenizer, str) or not tokenizer:
        raise Unresolved("data")
    if corpus != "offline" and not corpus.startswith("hf:"):
        path = Path(corpus).expanduser()
        if not path.exists() or path.is_file() and path.suffix not in LOCAL_EXTS:
            raise Unresolved("data.corpus")
    if corpus.startswith("hf:") and not corpus[3:].split(":")[0]:
        raise Unresolved("data.corpus")
    if tokenizer == "byte":
        return 256
    if tokenizer == "bpe":
        return vocab
    if not Path(tokenizer).expanduser().is_file():
        raise Unresolved("data.tokenizer")
    try:
        saved = json.loads(Path(tokenizer).expanduser().read_text())
        entries = saved["model"]["vocab"]
        tokens = set(entries) if isinstance(entries, dict) else {entry[0] for entry in entries}
        tokens |= {added["content"] for added in saved.get("added_tokens") or []}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return len(tokens) or None


def _train_spec(spec: dict[str, Any]) -> tuple[int | None, int]:
    """Spec.from_dict of a train config (without a budget: one of 1 s, which does not change the
    model) -> (the vocabulary its data has, or None for the preset's; its batch size)."""
    given = _known_keys(spec, TRAIN_KEYS)
    _choice(given.get("recipe", "lean"), RECIPES)
    _choice(given.get("size", "tiny"), tuple(SIZES))
    model = given.get("model")
    if model is not None and not isinstance(model, dict):
        raise Unresolved("model")
    checks: dict[str, Any] = {
        "seed": lambda v: _integer(v, lo=0),
        "tokens": lambda v: _integer(v, lo=1, allow_none=True),
        "batch_size": lambda v: _integer(v, lo=1),
        "seq_len": lambda v: _integer(v, lo=2, allow_none=True),
        "optimizer": lambda v: _choice(v, OPTIMIZERS),
        "weight_decay": lambda v: _number(v, lo=0, allow_none=True),
        "warmup_steps": lambda v: _integer(v, lo=0),
        "cooldown_frac": lambda v: _number(v, lo=0, lo_open=True, hi=1),
        "grad_clip": lambda v: _number(v, lo=0),
        "eval_loops": lambda v: None if v is None else _int_list(v),
        "calib_steps": lambda v: _integer(v, lo=2),
        "ckpt_minutes": lambda v: _number(v, lo=0, lo_open=True),
        "compile": _boolean,
        "device": _device,
    }
    for name in ("time_s", "flops", "lr", "adam_lr"):
        checks[name] = lambda v: _number(v, lo=0, lo_open=True, allow_none=True)
    for name in ("eval_every", "eval_tokens", "ckpt_every", "log_every"):
        checks[name] = lambda v: _integer(v, lo=1)
    for name, check in checks.items():
        if name in given:
            check(given[name])
    budgets = sum(given.get(name) is not None for name in ("tokens", "time_s", "flops"))
    if budgets > 1:
        raise Unresolved("budget")
    return _data_vocab(given.get("data")), _integer(given.get("batch_size", TRAIN_BATCH_SIZE), lo=1)


# ---- model/counts.py and model/flops.py


def _layer_params(c: dict[str, Any]) -> list[int]:
    d, hd = c["d_model"], c["n_heads"] * c["head_dim"]
    per_layer = 3 * d * hd + hd * d + 2 * d * c["mlp_ratio"] * d + 2 * d
    gate, ve = min(VE_GATE_CHANNELS, d) * c["n_heads"], set(_value_embed_layers(c))
    return [
        per_layer + (gate if i in ve else 0) for i in range(c["n_prelude"] + c["n_recurrent"] + c["n_coda"])
    ]


def _params(c: dict[str, Any]) -> dict[str, int]:
    """param_count's total and once_and_recurrent_params' n_once / n_rec."""
    d, layers, first = c["d_model"], _layer_params(c), c["n_prelude"]
    after = first + c["n_recurrent"]
    injection = 3 * d + 2 * d * d if c["injection"] == "diagonal" else 0
    tables = c["vocab_size"] * d * (1 + len(_value_embed_layers(c)) + (0 if c["tie_embeddings"] else 1))
    n_once = sum(layers[:first]) + sum(layers[after:]) + d + injection
    if not c["tie_embeddings"]:
        n_once += c["vocab_size"] * d
    return {
        "n_params": tables + sum(layers) + d + injection,
        "n_once": n_once,
        "n_rec": sum(layers[first:after]),
    }


def _layer_flops(c: dict[str, Any], settings: tuple[dict, int, int], value_embed: bool) -> float:
    """model.flops.layer_flops, dense attention convention, the model's seq_len."""
    d, head_dim, T = c["d_model"], c["head_dim"], c["seq_len"]
    rc, heads, hidden = settings
    width = heads * head_dim
    flops = 4.0 * d * hidden
    if rc["attention"]:
        flops += 2 * 2 * d * width
        if not rc["reuse_kv"]:
            flops += 2 * 2 * d * width
            if value_embed:
                flops += 2 * min(VE_GATE_CHANNELS, d) * heads
        window = rc["window"]
        block = None if window is None else max(window, CPU_BLOCK_MIN)
        if window is None or window >= T or T < max(8 * block, 512):
            pairs: float = float(T * T)
        else:
            pairs = -(-T // block) * block * 2 * block
        flops += 4.0 * width * pairs / T
    return flops


def _flops_per_token(c: dict[str, Any], batch_size: int) -> float:
    """model.flops.training_flops(cfg, batch_size).total: expected over the loop sampler."""
    ve = set(_value_embed_layers(c))
    full = (FULL_ROUND, c["n_heads"], c["mlp_ratio"] * c["d_model"])
    n_pre, n_rec, k = c["n_prelude"], c["n_recurrent"], c["grad_rounds"]
    diagonal = c["injection"] == "diagonal"
    if c["loop_sampler"] == "fixed":  # step_flops: one count for the whole batch, no padding
        n = c["loops"]
        run = [1.0] * n
        grad = [1.0 if k is None or r >= n - k else 0.0 for r in range(n)]
        prelude_grad = 1.0 if diagonal or (n > 0 and grad[0]) else 0.0
    else:
        sequences = batch_size if c["loop_sampler"] == "poisson_seq" else 1
        mean = float(c["loops"])
        upto = int(mean + 40 * math.sqrt(mean) + 60)
        cdf, total = [], 0.0
        for j in range(upto + (k or 0) + 1):  # P(max(1, Poisson(mean)) <= j)
            total += math.exp(-mean + j * math.log(mean) - math.lgamma(j + 1))
            cdf.append(0.0 if j == 0 else min(total, 1.0))

        def cdf_at(j: int) -> float:
            return cdf[min(j, len(cdf) - 1)]

        def in_window(j: int) -> float:
            return 1.0 - cdf_at(j) if k is None else cdf_at(j + k) - cdf_at(j)

        n_rounds = next((g for g in range(upto) if 1.0 - cdf_at(g) ** sequences < TAIL), upto)
        if sequences == 1:
            run, grad = [1.0 - cdf_at(j) for j in range(n_rounds)], [in_window(j) for j in range(n_rounds)]
        else:
            run = [1.0 - cdf_at(g) ** sequences for g in range(n_rounds)]
            if k is None:
                grad = run
            elif len(c["rounds"]) == 1:
                grad = [cdf_at(g + k) ** sequences - cdf_at(g) ** sequences for g in range(n_rounds)]
            else:
                grad = [1.0 - (1.0 - in_window(g)) ** sequences for g in range(n_rounds)]
        prelude_grad = 1.0 if diagonal or k is None else 1.0 - (1.0 - cdf_at(k)) ** sequences
    distinct = [
        sum(_layer_flops(c, _round_settings(c, r), n_pre + j in ve) for j in range(n_rec))
        for r in range(len(c["rounds"]))
    ]
    per_round = [distinct[min(g, len(distinct) - 1)] for g in range(len(run))]

    def once(forward: float, backward_probability: float) -> tuple[float, float]:
        return forward, BACKWARD_FACTOR * backward_probability * forward

    coda_first = n_pre + n_rec
    parts = [
        once(sum(_layer_flops(c, full, i in ve) for i in range(n_pre)), prelude_grad),
        once(2 * 2.0 * c["d_model"] ** 2 if diagonal else 0.0, 1.0),
        *((p * f, BACKWARD_FACTOR * q * f) for p, q, f in zip(run, grad, per_round)),
        once(sum(_layer_flops(c, full, coda_first + i in ve) for i in range(c["n_coda"])), 1.0),
        once(2.0 * c["d_model"] * c["vocab_size"], 1.0),
    ]
    return sum(f for f, _ in parts) + sum(b for _, b in parts)


# ---- orchestrator/variants.py


def _plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _label_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, float) and value.is_integer():
        return str(value)
    return _canonical(value)


def variant_columns(kind: str, spec: Any) -> dict[str, Any]:
    """The variant and architecture columns of a train or decode-bench config; {} when it names no
    model of this revision."""
    if kind not in MODEL_KINDS or not isinstance(spec, dict):
        return {}
    recipe, size, model = spec.get("recipe"), spec.get("size") or "tiny", spec.get("model") or {}
    if not isinstance(recipe, str) or not isinstance(size, str) or not isinstance(model, dict):
        return {}
    given = dict(model)
    seq_len = spec.get("seq_len") if kind == "train" else None
    if seq_len is not None:
        given["seq_len"] = seq_len
    batch_size = TRAIN_BATCH_SIZE  # a decode bench: FLOPs at the train default
    try:
        cfg = None
        if kind == "train":
            try:
                vocab, batch_size = _train_spec(spec)
                cfg = preset(recipe, size, **given)
                if vocab is not None:
                    cfg = _model_config({**cfg, "vocab_size": vocab})
            except (ValueError, TypeError, OSError):  # no train Spec of the time: the preset's vocabulary
                cfg, batch_size = None, spec.get("batch_size", TRAIN_BATCH_SIZE)
        if cfg is None:
            cfg = preset(recipe, size, **given)
        base = preset(recipe, size)
    except (ValueError, TypeError):
        return {}
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        return {}
    overrides = {k: _plain(cfg[k]) for k in sorted(given) if cfg[k] != base[k]}
    label = LABEL_SEPARATOR.join(
        [recipe, *(f"{key}={_label_value(v)}" for key, v in sorted(overrides.items()))]
    )
    identity = _canonical({"recipe": recipe, "size": size, "model": overrides})
    out: dict[str, Any] = {
        "variant_id": hashlib.sha256(identity.encode()).hexdigest()[:VARIANT_ID_HEX],
        "variant_label": label if len(label) <= LABEL_MAX else label[: LABEL_MAX - 1] + "…",
        "loop_sampler": cfg["loop_sampler"],
        "loops": cfg["loops"],
        "n_prelude": cfg["n_prelude"],
        "n_recurrent": cfg["n_recurrent"],
        "n_coda": cfg["n_coda"],
        "effective_depth": float(cfg["n_prelude"] + cfg["n_recurrent"] * cfg["loops"] + cfg["n_coda"]),
        "d_model": cfg["d_model"],
        "injection": cfg["injection"],
        **_params(cfg),
        "flops_per_token": float(_flops_per_token(cfg, batch_size)),
    }
    for column in ("effective_depth", "flops_per_token"):
        if not math.isfinite(out[column]):
            return {}  # the code of the time failed on float(None) here: NULLs
    return out
