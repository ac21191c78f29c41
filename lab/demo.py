"""`looplab demo`: the whole product in one command, on local Ray and a SQLite file.

Submits recipes parcae, fixed4, lean and plain x 2 seeds on the `small` model and the embedded
offline corpus (byte tokenizer: no tokenizer training, so every second goes to the models), each
with its depth sweep and decode benchmark, plus one iso-time run (parcae given the training time of
lean seed 0); runs the queue with live progress; prints the iso-data and iso-time tables.
Sized to finish in about 10 minutes on 2 CPU cores (`--fast`: a 1-2 minute smoke test).
Running it again reuses what is done (submission is idempotent, finished jobs are kept).

`looplab demo --study iso-depth` runs a CPU-sized iso-depth scaling study instead (`ISO_DEPTH`:
r in {1, 2, 4} x widths 32/48/64 x three FLOP budgets, tiny model, byte corpus; no depth sweeps, to
spend the time on the runs) and prints the fitted law with its bootstrap intervals: whatever φ comes
out of such small runs is reported as it is. Sized for about 8 minutes on 2 quiet cores.

`looplab demo --study loop-design` runs a CPU-sized loop-design study (`LOOP_DESIGN`,
`lab.studies.loop_design_grid`): BaseLoop 2x4 and 4x2 and NonLoop 8 on the same tokens, plus
the injection (scalar, channel, dense, diagonal), history (1) and timestep (loop_gate, branch_gate,
adaln) variants of BaseLoop 2x4, one seed each, every run with a depth sweep to 3x its trained loops
(loop geometry per round, interaction matrices at the trained and twice the trained count); prints the
extrapolation table and where the dashboard draws it (page Extrapolation).

`looplab demo --study adaptive` runs a CPU-sized adaptive-compute study (`ADAPTIVE`,
`lab.studies.adaptive_grid`): parcae, fixed4, lean and two loop-design variants trained on
~1 M tokens each, each with a depth sweep and an adaptive job (exit rules x thresholds x KV strategies,
task scores and decode timings with exits); prints the rounds saved at equal loss and the frontier
(page Adaptive draws them). See docs/adaptive.md for its run time.

`looplab demo --study learned-exits` runs the learned-exit study (`LEARNED_EXITS`,
`lab.studies.learned_exits_grid`): lean and BaseLoop 2x4 trained with an exit gate under each
objective (entropy, geometric, act) at two coefficients plus without one, two seeds, each with a depth
sweep and an adaptive job whose rules include the `gate` rule; prints the same frontier tables as the
adaptive study (`--fast`: lean only, one coefficient per objective, one seed). docs/adaptive.md has its
time and finding.

`looplab demo --study lean` runs the lean-recipe study at CPU size (`LEAN`): parcae, fixed4 and lean on
`tiny` at 2^20 tokens (about 1 M, where the findings' shape shows; the default demo's 61 k tokens show
the machinery only), 2 seeds (`--fast`: 1), each with a depth sweep over 1-16 loops; prints each finding
of the study judged on this run (`analysis.findings`, the registry's lean part) and writes the study report
(`lean-study.html`, `lean-study.md`, lab/report/). About 30 minutes on 2 quiet cores (`--fast`:
about 12).

Every demo calibrates this machine first when no calibration is cached (about 30 s, cached for a week),
so its jobs carry plan estimates and the Plan page shows planned against actual.
"""

from __future__ import annotations

import logging
import os
import sys
import textwrap
import time

from looplab.lab.display import looplab_command
from looplab.orchestrator.db import display_url
from looplab.orchestrator.grid import Grid
from looplab.orchestrator.states import JobStatus

DATA = {"corpus": "offline", "tokenizer": "byte"}
FULL = {
    # lean first: the iso-time run waits for lean seed 0, so that should finish early
    "recipes": ["lean", "parcae", "fixed4", "plain"],
    "seeds": [0, 1],
    "train": {
        "size": "small",
        "seq_len": 64,
        "batch_size": 8,
        "tokens": 8 * 64 * 120,
        "eval_every": 20,
        "eval_tokens": 2048,
        "ckpt_every": 40,
        "calib_steps": 4,
        "data": DATA,
    },
    "depth_sweep": {"loops": [1, 2, 4, 8, 12, 16], "eval_tokens": 2048, "batch_size": 8},
    "decode_bench": {"context_lens": [64, 256], "batch_sizes": [1, 4], "warmup": 2, "steps": 6},
}
FAST = {
    "recipes": ["lean", "parcae"],
    "seeds": [0],
    "train": {
        "size": "tiny",
        "seq_len": 32,
        "batch_size": 4,
        "tokens": 4 * 32 * 10,
        "eval_every": 5,
        "eval_tokens": 512,
        "ckpt_every": 5,
        "calib_steps": 2,
        "data": DATA,
    },
    "depth_sweep": {"loops": [1, 2, 4, 8], "eval_tokens": 512, "batch_size": 4},
    "decode_bench": {"context_lens": [64], "batch_sizes": [1], "warmup": 1, "steps": 3},
}


# The iso-depth study at CPU size: 27 runs, about 3,600 steps in all (`--fast`: 12 runs, 800 steps).
# Budgets double: the narrowest member at the largest budget trains about 390 steps of 8 x 64 tokens,
# the widest at the smallest about 30.
ISO_DEPTH = {
    "r": [1, 2, 4],
    "widths": [32, 48, 64],
    "flops": [1e11, 2e11, 4e11],
    "seeds": [0],
    "train": {
        "batch_size": 8,
        "seq_len": 64,
        "eval_every": 200,
        "eval_tokens": 4096,
        "ckpt_every": 1000,
        "head_dim": 16,
    },
}
ISO_DEPTH_FAST = {**ISO_DEPTH, "r": [1, 2], "widths": [32, 48], "flops": [4e10, 8e10, 1.6e11]}


def iso_depth_grids(fast: bool = False) -> list[Grid]:
    """The demo's iso-depth study (`lab.studies.iso_depth_grid`), without depth sweeps."""
    from looplab.lab.studies import iso_depth_grid

    p = ISO_DEPTH_FAST if fast else ISO_DEPTH
    train = dict(p["train"])
    head_dim = train.pop("head_dim")
    return iso_depth_grid(
        r=p["r"],
        widths=p["widths"],
        flops=p["flops"],
        seeds=p["seeds"],
        name="demo-iso-depth-fast" if fast else "demo-iso-depth",
        data=DATA,
        head_dim=head_dim,
        then=[],
        **train,
    )


# The loop-design study at CPU size: 11 runs of 8 x 64 tokens x 200 steps on a d_model 64 model of
# effective depth 8 (`--fast`: the three layouts and two variants, 30 steps each).
LOOP_DESIGN = {
    "variants": {
        "injections": ["scalar", "channel", "dense", "diagonal"],
        "histories": [1],
        "timesteps": ["loop_gate", "branch_gate", "adaln"],
    },
    "train": {
        "batch_size": 8,
        "seq_len": 64,
        "tokens": 8 * 64 * 200,
        "eval_every": 100,
        "eval_tokens": 2048,
        "ckpt_every": 1000,
    },
    "depth_sweep": {"eval_tokens": 2048, "batch_size": 8, "interaction_tokens": 512},
}
LOOP_DESIGN_FAST = {
    **LOOP_DESIGN,
    "variants": {"injections": ["scalar"], "histories": [], "timesteps": ["loop_gate"]},
    "train": {**LOOP_DESIGN["train"], "tokens": 8 * 64 * 30, "eval_every": 30, "eval_tokens": 1024},
    "depth_sweep": {"eval_tokens": 1024, "batch_size": 8, "interaction_tokens": 256},
}


def loop_design_grids(fast: bool = False) -> list[Grid]:
    """The demo's loop-design study (`lab.studies.loop_design_grid`), with depth sweeps."""
    from looplab.lab.studies import loop_design_grid

    p = LOOP_DESIGN_FAST if fast else LOOP_DESIGN
    train = dict(p["train"])
    tokens = train.pop("tokens")
    return loop_design_grid(
        **p["variants"],
        tokens=tokens,
        name="demo-loop-design-fast" if fast else "demo-loop-design",
        data=DATA,
        follow={"depth_sweep": p["depth_sweep"]},
        **train,
    )


# The lean-recipe study at CPU size: 3 recipes x 2 seeds x 2^20 tokens of tiny (2,048 steps of 8 x 64),
# tiny trains at ~2,500-4,300 tokens/s on one core here, so ~4-7 minutes a run (`--fast`: seed 0 only).
# The sweep's eval_tokens and batch size are the train job's, so its loss at the trained count is the
# run's final validation loss; its loop counts are the note's (1-32), which its depth claims read.
LEAN = {
    "recipes": ["parcae", "fixed4", "lean"],
    "seeds": [0, 1],
    "train": {
        "size": "tiny",
        "tokens": 2**20,
        "eval_every": 1024,
        "eval_tokens": 32768,
        "ckpt_every": 512,
        "data": DATA,
    },
    "depth_sweep": {"loops": [1, 2, 3, 4, 6, 8, 12, 16, 24, 32], "eval_tokens": 32768},
}
LEAN_FAST = {**LEAN, "seeds": [0]}
# the report files each study writes (NAME.html and NAME.md), ending with the study's scorecard
LEAN_REPORT = "lean-study"
ISO_DEPTH_REPORT = "iso-depth-study"
LOOP_DESIGN_REPORT = "loop-design-study"


def lean_grids(fast: bool = False) -> list[Grid]:
    """The demo's lean-recipe study: one grid, every run with its depth sweep."""
    p = LEAN_FAST if fast else LEAN
    return [
        Grid(
            "demo-lean-fast" if fast else "demo-lean",
            base=p["train"],
            sweep={"recipe": p["recipes"], "seed": p["seeds"]},
            then=["depth_sweep"],
            follow={"depth_sweep": p["depth_sweep"]},
        )
    ]


def print_extrapolation(url: str, grid_prefix: str) -> None:
    """The loss at the trained depth and beyond per variant of the study (the page's own table)."""
    import pandas as pd

    from looplab.analysis import extrapolation
    from looplab.orchestrator import frames

    runs = frames.runs(url)
    ids = runs.loc[runs["grid"].fillna("").str.startswith(grid_prefix), "job_id"]
    depth = frames.depth(url)
    table = extrapolation.summary(extrapolation.loss_curves(depth[depth["train_job_id"].isin(ids)]))
    cols = [c for c in extrapolation.SUMMARY_COLUMNS if c not in ("size", "n_seeds")]
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.precision", 4):
        print("\n== extrapolation: validation loss at the trained effective depth and beyond ==")
        print(_fitted(table[cols], False) if not table.empty else "(no finished depth sweep)")


# The adaptive-compute study at CPU size: parcae, fixed4, lean, BaseLoop 2x4 and BaseLoop 2x4 with loop
# gating, ~1 M tokens each on `tiny` (16 x 64 tokens x 1,000 steps: enough that depth matters; at the
# main demo's tokens the depth curves are flat and a frontier degenerate), each with a depth sweep and
# an adaptive job of 4 rules x 3 thresholds x 4 KV strategies on 4,096 validation tokens (`--fast`:
# parcae and fixed4, 20 steps, one threshold per rule).
ADAPTIVE = {
    "recipes": ["parcae", "fixed4", "lean"],
    "designs": {},
    "train": {"batch_size": 16, "seq_len": 64, "eval_every": 500, "eval_tokens": 2048, "ckpt_every": 500},
    "tokens": 16 * 64 * 1000,
    "sweep_tokens": 4096,
    "adaptive": {
        "rules": {
            "state": [0.02, 0.05, 0.1],
            "kl": [0.002, 0.01, 0.05],
            "entropy": [0.005, 0.02, 0.1],
            "argmax": [1, 2, 3],
        },
        "kv_strategies": ["per_round", "latest", "first", "last_m"],
        "kv_m": 2,
        "tasks": ["deduction"],
        "n_per_subset": 4,
        "decode_steps": 6,
        "decode_batch_sizes": [1, 4],
    },
}
ADAPTIVE_FAST = {
    **ADAPTIVE,
    "recipes": ["parcae", "fixed4"],
    "designs": {"layouts": []},
    "train": {**ADAPTIVE["train"], "eval_every": 20, "eval_tokens": 512},
    "tokens": 16 * 64 * 20,
    "sweep_tokens": 1024,
    "adaptive": {
        **ADAPTIVE["adaptive"],
        "rules": {"state": [0.05], "kl": [0.01], "entropy": [0.02], "argmax": [2]},
        "n_per_subset": 2,
        "decode_steps": 2,
        "decode_batch_sizes": [2],
    },
}


def adaptive_grids(fast: bool = False) -> list[Grid]:
    """The demo's adaptive-compute study (`lab.studies.adaptive_grid`)."""
    from looplab.lab.studies import adaptive_grid

    p = ADAPTIVE_FAST if fast else ADAPTIVE
    return adaptive_grid(
        p["recipes"],
        p["designs"],
        tokens=p["tokens"],
        name="demo-adaptive-fast" if fast else "demo-adaptive",
        data=DATA,
        sweep_tokens=p["sweep_tokens"],
        adaptive=p["adaptive"],
        **p["train"],
    )


def print_adaptive(url: str, grid_prefix: str) -> None:
    """The frontier of the study's runs (the page Adaptive's tables): rounds saved at equal loss per
    variant, rule and KV strategy, then every per_round point (loss against rounds and compute)."""
    import pandas as pd

    from looplab.analysis import adaptive, comparison, stats
    from looplab.orchestrator import frames

    runs = frames.runs(url)
    ids = runs.loc[runs["grid"].fillna("").str.startswith(grid_prefix), "job_id"]
    evals, depth = frames.adaptive(url), frames.depth(url)
    evals, depth = evals[evals["train_job_id"].isin(ids)], depth[depth["train_job_id"].isin(ids)]
    noise = stats.noise_floor(comparison.eval_loss_per_run(runs, frames.depth(url)))
    saved = adaptive.rounds_saved(evals, depth, noise)
    points = adaptive.frontier(evals)
    with pd.option_context(
        "display.width", 200, "display.max_columns", 30, "display.max_rows", 500, "display.precision", 4
    ):
        print("\n== adaptive compute: rounds saved at equal loss to the fixed depth (max_rounds) ==")
        print(textwrap.fill(f"noise floor: {noise.describe(adaptive.EQUAL_THRESHOLD)}", WIDTH))
        cols = [
            "variant_label",
            "rule",
            "strategy",
            "max_rounds",
            "reference_loss",
            "threshold",
            "val_loss",
            *adaptive.SAVINGS,
        ]
        print(_fitted(saved[cols], False) if not saved.empty else "(no finished adaptive job)")
        print(
            "(first and last_m change the function even without exits: they are compared with the\n"
            "trained model's fixed depth all the same)"
        )
        print(
            "\n== the frontier under per_round: loss against rounds per token and compute (rounds' worth) =="
        )
        cols = ["variant_label", "rule", "threshold", "mean_rounds", "equivalent_rounds", "val_loss"]
        shown = points[points["strategy"] == "per_round"]
        print(_fitted(shown[cols], False) if not shown.empty else "(no finished adaptive job)")


# The learned-exit study at CPU size (docs/adaptive.md, "Learned exits"): `tiny`, 16 x 64 tokens a step.
LEARNED_EXITS = {
    "recipes": ["lean", "base_loop"],
    "objectives": None,  # lab.studies.LEARNED_EXIT_OBJECTIVES: two coefficients each
    "seeds": [0, 1],
    "tokens": 16 * 64 * 1000,
    "train": {"batch_size": 16, "seq_len": 64, "eval_every": 500, "eval_tokens": 2048, "ckpt_every": 500},
    "sweep_tokens": 4096,
    "adaptive": {"kv_strategies": ["per_round"], "decode_steps": 4, "decode_batch_sizes": [1]},
}
LEARNED_EXITS_FAST = {
    **LEARNED_EXITS,
    "recipes": ["lean"],
    "objectives": {"entropy": [0.05], "geometric": [0.05], "act": [0.01]},
    "seeds": [0],
    "tokens": 16 * 64 * 150,
    "train": {**LEARNED_EXITS["train"], "eval_every": 50, "eval_tokens": 512, "ckpt_every": 50},
    "sweep_tokens": 1024,
    "adaptive": {**LEARNED_EXITS["adaptive"], "decode_steps": 2},
}


def learned_exits_grids(fast: bool = False) -> list[Grid]:
    """The demo's learned-exit study (`lab.studies.learned_exits_grid`)."""
    from looplab.lab.studies import learned_exits_grid

    p = LEARNED_EXITS_FAST if fast else LEARNED_EXITS
    return learned_exits_grid(
        p["recipes"],
        p["objectives"],
        p["tokens"],
        p["seeds"],
        "demo-learned-exits-fast" if fast else "demo-learned-exits",
        DATA,
        adaptive=p["adaptive"],
        sweep_loops=[1, 2, 3, 4],
        sweep_tokens=p["sweep_tokens"],
        **p["train"],
    )


def print_best_at_loss(url: str, grid_prefix: str) -> None:
    """Learned and post-hoc rules on one axis (`analysis.adaptive.best_at_loss`): at each variant's
    fixed-depth loss, the cell of any variant that reaches it with the fewest rounds' worth of FLOPs."""
    import pandas as pd

    from looplab.analysis import adaptive
    from looplab.orchestrator import frames

    runs = frames.runs(url)
    ids = runs.loc[runs["grid"].fillna("").str.startswith(grid_prefix), "job_id"]
    evals = frames.adaptive(url)
    table = adaptive.best_at_loss(evals[evals["train_job_id"].isin(ids)])
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 4):
        print("\n== at each loss level, the rule that spends the fewest rounds (learned: gate) ==")
        print(_fitted(table, False) if not table.empty else "(no finished adaptive job)")


def grids(fast: bool = False) -> list[Grid]:
    """The demo grids: the iso-data grid and the iso-time run that refers to it."""
    p = FAST if fast else FULL
    follow = {"depth_sweep": p["depth_sweep"], "decode_bench": p["decode_bench"]}
    main = Grid(
        "demo-fast" if fast else "demo",
        base=p["train"],
        sweep={"recipe": p["recipes"], "seed": p["seeds"]},
        then=["depth_sweep", "decode_bench"],
        follow=follow,
    )
    iso_base = {k: v for k, v in p["train"].items() if k != "tokens"}
    # priority 1: the iso-time run starts as soon as its reference is done, not at the very end
    iso = Grid(
        ("demo-fast" if fast else "demo") + "-isotime",
        base={
            **iso_base,
            "recipe": "parcae",
            "seed": 0,
            "budget": {"match_time_of": {"recipe": "lean", "seed": 0}},
        },
        then=["depth_sweep"],
        follow={"depth_sweep": p["depth_sweep"]},
        priority=1,
    )
    return [main, iso]


# the iso-time table's columns as the demo prints them
ISO_TIME_SHOWN = [
    "recipe",
    "seed",
    "ref_recipe",
    "ref_seed",
    "final_val_loss",
    "ref_final_val_loss",
    "diff",
    "verdict",
    "train_seconds",
    "ref_train_seconds",
    "tokens",
    "ref_tokens",
]


# what the narrow iso-data table (`looplab demo`) leaves out, besides the per-seed losses ("seed N"):
# `--wide` shows them
ISO_DATA_WIDE_ONLY = ("recipe", "n_ref", "method", "data_worth_pct", "variant_id")
WIDTH = 120


def print_tables(
    url: str,
    grids: list[str] | None = None,
    by_variant: bool = False,
    wide: bool = False,
    iso_time: bool = True,
) -> None:
    """The iso-data and iso-time comparisons, computed by the Compare page's tested functions: of the
    runs of `grids` (None: every run), the iso-time pairs named by recipe or, `by_variant`, by variant
    label (recipes alone do not tell model families apart). Within WIDTH columns (no ISO_DATA_WIDE_ONLY, the
    iso-time pairs without their token counts; a table still wider, a long variant label's, is folded
    into blocks of columns); `wide` (`looplab demo --wide`): every column on one line per row. Without
    `iso_time`, the iso-data table alone."""
    import pandas as pd

    from looplab.analysis import comparison
    from looplab.orchestrator import frames

    runs = frames.runs(url)
    runs = runs if grids is None else runs[runs["grid"].isin(grids)]
    evals = comparison.eval_loss_per_run(runs, frames.depth(url))
    name = "variant_label" if by_variant else "recipe"
    with pd.option_context("display.max_columns", 40, "display.precision", 4):
        print("\n== iso-data: equal model size and tokens (looped recipes at their best loop count) ==")
        iso_data = comparison.iso_data_table(evals)
        cols = [c for c in iso_data.columns if c not in ("size", "budget_tokens", "std", "loop_rule")]
        if not wide:  # a row is a variant: its label names it
            cols = [c for c in cols if c not in ISO_DATA_WIDE_ONLY and not c.startswith("seed ")]
        print(_fitted(iso_data[cols], wide) if not iso_data.empty else "(no finished runs)")
        if not iso_time:
            return
        print("\n== iso-time: equal training wall time (final validation loss) ==")
        pairs = comparison.iso_time_pairs(runs)
        cols = [c.replace("recipe", name) for c in ISO_TIME_SHOWN]
        if not wide:
            cols = [c for c in cols if c not in ("tokens", "ref_tokens")]
        print(_fitted(pairs[cols], wide) if not pairs.empty else "(no finished iso-time pair)")


def _fitted(table, wide: bool) -> str:
    """`table` as text: one line per row when `wide`, else within WIDTH columns (folded into blocks of
    columns, as pandas does, only where its narrow columns still do not fit)."""
    text = table.to_string(index=False)
    if wide or max(len(line) for line in text.splitlines()) <= WIDTH:
        return text
    return table.to_string(index=False, line_width=WIDTH)


def ensure_calibration() -> None:
    """Measure this machine once when no calibration is cached, so that `submit` stores a plan estimate
    with every job (the Plan page then shows planned against actual); a failed measurement costs only
    the estimates."""
    from looplab.lab.planner import cached_calibration, calibrate, local_slots

    device = "cuda" if local_slots(num_cpus=1)[1] > 0 else "cpu"
    if cached_calibration(device) is not None:
        return
    print("calibrating this machine for the plan estimates (about 30 s, cached for a week) ...", flush=True)
    try:
        calibrate(device)
    except Exception as e:  # estimates are advice: the demo runs without them
        print(f"(no calibration: {type(e).__name__}: {e}; the jobs get no plan estimate)")


def _run(grids: list[Grid], what: str, db: str | None, artifacts: str, progress_every_s: float):
    """Submit `grids` and run the queue until they are done; returns (queue, status of their jobs,
    the scheduler's exit code, the failed jobs). Prints what happened on the way."""
    from looplab.lab.api import Queue

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per job: 2 jobs on 2 cores, no thrashing
    q = Queue(db=db, artifacts=artifacts)
    t0 = time.time()
    ensure_calibration()
    ids = q.submit(grids)
    print(
        f"{what}: {len(ids)} jobs ({len(q.last_added)} new) in {display_url(q.url)}; "
        f"artifacts in {q.artifacts.absolute()}"
    )
    rc = q.run(
        until_empty=True, num_cpus=os.cpu_count() or 2, num_gpus=None, progress_every_s=progress_every_s
    )
    st = q.status()
    st = st[st["id"].isin(ids)]
    counts = {k: int(v) for k, v in st["status"].value_counts().items()}
    print(f"\n{what}: {counts} in {time.time() - t0:.0f} s")
    failed = st[st["status"] == JobStatus.FAILED]
    if rc != 0:
        print("demo stopped; finished work is kept: run the same command again to continue where it stopped")
    else:
        for r in failed.itertuples():
            print(f"  job {r.id} ({r.kind}) failed: {r.error}   (details: {looplab_command(db)} logs {r.id})")
    return q, rc, failed


def main(
    db: str | None = None, fast: bool = False, artifacts: str = "looplab_artifacts", wide: bool = False
) -> int:
    q, rc, failed = _run(grids(fast), "demo", db, artifacts, progress_every_s=10.0)
    if rc != 0:
        return rc
    try:
        print_tables(q.url, wide=wide)
    except Exception as e:  # the tables are a summary; never hide the run's outcome behind them
        print(f"(dashboard tables unavailable: {type(e).__name__}: {e}); the runs view instead:")
        print(q.results("train_results")[["job_id", "tokens", "train_seconds", "final_val_loss"]].to_string())
    looplab = looplab_command(db)
    print(f"\nopen the dashboard: {looplab} dashboard")
    print(f'query the results:  {looplab} sql "SELECT recipe, seed, final_val_loss FROM runs"')
    names = " ".join(g.name for g in grids(fast))
    print(f"a study report:     {looplab} report {names} -o demo-report.html")
    return 0 if failed.empty else 1


def print_iso_depth_fit(url: str, grid: str, bootstrap: int = 200) -> None:
    """The fitted iso-depth law of `grid`'s runs (`looplab fit iso-depth --grid NAME` prints the same)."""
    from looplab.analysis import iso_depth
    from looplab.lab.fit import fit_runs

    print(iso_depth.report_text(iso_depth.fit_iso_depth(fit_runs(url, grid), bootstrap=bootstrap)))


def main_iso_depth(db: str | None = None, fast: bool = False, artifacts: str = "looplab_artifacts") -> int:
    t0 = time.time()
    study = iso_depth_grids(fast)
    q, rc, failed = _run(study, "demo --study iso-depth", db, artifacts, progress_every_s=15.0)
    if rc != 0:
        return rc
    t_fit = time.time()
    try:
        print_iso_depth_fit(q.url, study[0].name)
    except ValueError as e:  # ConfigError: too few finished runs to identify the law
        print(f"(no fit: {e})")
        return 1
    scored = score_study(q.url, [g.name for g in study], "iso-depth", ISO_DEPTH_REPORT)
    looplab = looplab_command(db)
    print(f"\nfit and scorecard in {time.time() - t_fit:.0f} s; whole demo {time.time() - t0:.0f} s")
    print(f"again, or as JSON: {looplab} fit iso-depth --grid {study[0].name} [--json]")
    print(f"see it drawn:      {looplab} dashboard   (pages Scaling, Claims)")
    return 0 if failed.empty and scored else 1


def main_loop_design(db: str | None = None, fast: bool = False, artifacts: str = "looplab_artifacts") -> int:
    t0 = time.time()
    study = loop_design_grids(fast)
    q, rc, failed = _run(study, "demo --study loop-design", db, artifacts, progress_every_s=15.0)
    if rc != 0:
        return rc
    prefix = "demo-loop-design-fast" if fast else "demo-loop-design"
    try:
        print_extrapolation(q.url, prefix)
    except Exception as e:  # a summary; never hide the run's outcome behind it
        print(f"(extrapolation table unavailable: {type(e).__name__}: {e})")
    scored = score_study(q.url, [g.name for g in study], "loop-design", LOOP_DESIGN_REPORT)
    looplab = looplab_command(db)
    print(f"\nwhole demo {time.time() - t0:.0f} s")
    print(f"see it drawn:      {looplab} dashboard   (pages Extrapolation, Claims)")
    print(
        f'query the results: {looplab} sql "SELECT variant_label, loops, skipped, round, interaction '
        'FROM interactions"'
    )
    return 0 if failed.empty and scored else 1


def main_adaptive(
    db: str | None = None, fast: bool = False, artifacts: str = "looplab_artifacts", learned: bool = False
) -> int:
    """`demo --study adaptive`, or with `learned` `demo --study learned-exits`: the same frontier tables."""
    t0 = time.time()
    study, grids_of = ("learned-exits", learned_exits_grids) if learned else ("adaptive", adaptive_grids)
    q, rc, failed = _run(grids_of(fast), f"demo --study {study}", db, artifacts, progress_every_s=15.0)
    if rc != 0:
        return rc
    try:
        print_adaptive(q.url, f"demo-{study}-fast" if fast else f"demo-{study}")
        if learned:
            print_best_at_loss(q.url, f"demo-{study}-fast" if fast else f"demo-{study}")
    except Exception as e:  # a summary; never hide the run's outcome behind it
        print(f"(adaptive tables unavailable: {type(e).__name__}: {e})")
    looplab = looplab_command(db)
    print(f"\nwhole demo {time.time() - t0:.0f} s")
    print(f"see it drawn:      {looplab} dashboard   (page Adaptive, /adaptive)")
    print(
        f'query the results: {looplab} sql "SELECT variant_label, config, val_loss, mean_rounds FROM adaptive"'
    )


def print_scorecard(url: str, grids: list[str], study: str) -> None:
    """The scorecard of `study` on the runs of `grids`: each claim's verdict, the study's figure and ours
    (`analysis.claims_measure`, as `looplab claims --study STUDY` and the report give it)."""
    from looplab.analysis import claims_text
    from looplab.lab.report import study_data

    card = study_data(url, grids).scorecards.get(study)
    print(f"\n== the {study} study's claims against this run ==")
    if card is None or card.empty:
        print("(no finished runs of the study)")
        return
    print(claims_text.text_scorecard(card))


def score_study(url: str, grids: list[str], study: str, report: str) -> bool:
    """Print the study's scorecard and write its report (`report`.html and .md): what a study is run
    for, so a failure in either is reported with its reason and returns False (the command then fails)."""
    from looplab.lab.report import write_report

    try:
        print_scorecard(url, grids, study)
        for fmt in ("html", "md"):
            path = write_report(url, grids, f"{report}.{fmt}", fmt)
            print(f"report: {path.absolute()}")
    except Exception as e:
        print(
            f"demo --study {study}: the scorecard or the report failed: {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        logging.getLogger(__name__).exception("the %s study's scorecard or report", study)
        return False
    return True


def main_lean(db: str | None = None, fast: bool = False, artifacts: str = "looplab_artifacts") -> int:
    t0 = time.time()
    study = lean_grids(fast)
    q, rc, failed = _run(study, "demo --study lean", db, artifacts, progress_every_s=30.0)
    if rc != 0:
        return rc
    names = [g.name for g in study]
    scored = score_study(q.url, names, "lean", LEAN_REPORT)
    looplab = looplab_command(db)
    print(f"\nwhole demo {time.time() - t0:.0f} s")
    print(f"the report again:  {looplab} report {' '.join(names)} -o {LEAN_REPORT}.html")
    print(f"see it drawn:      {looplab} dashboard   (pages Compare, Depth, Claims)")
    return 0 if failed.empty and scored else 1
