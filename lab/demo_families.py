"""`looplab demo --study families`: five model families side by side through the model contract.

looplab's own model (recipe parcae), the Huginn-style recurrent-depth family (`families/huginn`), the
Ouro-style looped stack with its learned exit (`families/ouro`), the Mixture-of-Recursions-style family
(`families/mor`, expert-choice router) and the example universal transformer
(`examples/universal_transformer.py`), on `tiny` widths (d_model 64)
and the embedded offline corpus (byte tokenizer), two seeds each (`lab.studies.families_grid`):

- at equal data: the same tokens for every run, each followed by a depth sweep over 1, 2, 4 and 8
  loops (the iso-data table compares them at their best or trained loop count);
- at equal training FLOPs: every other family given the training FLOPs parcae spends on those tokens,
  each family's FLOPs counted by its own model (`lab.studies.reference_flops`; a cheaper family trains
  more tokens), compared as the Compare page's iso-FLOP table does (`analysis.comparison.iso_flop_table`).
  FLOPs rather than wall time: on a shared CPU a time budget measures the machine's load as much as the
  model, and FLOPs are what a GPU study's budget is planned in.

It prints both tables and writes the study report (`families-study.html`, `.md`, lab/report/).
`--fast`: fewer tokens and a shorter sweep, the same design. Times are in docs/studies.md.
"""

from __future__ import annotations

import time

from looplab.lab.demo import DATA, _run, print_tables
from looplab.lab.display import looplab_command
from looplab.orchestrator.grid import Grid

FAMILIES = {
    "tokens": 8 * 64 * 200,
    "seeds": [0, 1],
    "train": {"batch_size": 8, "seq_len": 64, "eval_every": 100, "eval_tokens": 2048, "ckpt_every": 100},
    "depth_sweep": {"eval_tokens": 2048, "batch_size": 8, "interaction_loops": []},
    "sweep_loops": [1, 2, 4, 8],
}
FAMILIES_FAST = {
    **FAMILIES,
    "tokens": 8 * 64 * 40,
    "train": {**FAMILIES["train"], "eval_every": 40, "eval_tokens": 1024, "ckpt_every": 40},
    "depth_sweep": {"eval_tokens": 1024, "batch_size": 8, "interaction_loops": []},
    "sweep_loops": [1, 2, 4],
}
FAMILIES_REPORT = "families-study"


def families_grids(fast: bool = False) -> list[Grid]:
    """The demo's families study (`lab.studies.families_grid`)."""
    from looplab.lab.studies import families_grid

    p = FAMILIES_FAST if fast else FAMILIES
    return families_grid(
        tokens=p["tokens"],
        seeds=p["seeds"],
        name="demo-families-fast" if fast else "demo-families",
        data=DATA,
        sweep_loops=p["sweep_loops"],
        iso_time=False,
        iso_flops=True,
        follow={"depth_sweep": p["depth_sweep"]},
        **p["train"],
    )


def print_family_tables(url: str, grids: list[str]) -> None:
    """The iso-data and iso-FLOP tables of the study's runs (the demo's, by variant), then what each
    family costs per token and in parameters."""
    import pandas as pd

    from looplab.analysis import comparison
    from looplab.lab.demo import _fitted
    from looplab.orchestrator import frames

    # equal data: the study's first grid (the FLOP-matched runs train other token counts, one each)
    print_tables(url, grids[:1], by_variant=True, iso_time=False)
    runs = frames.runs(url)
    runs = runs[runs["grid"].isin(grids)]
    evals = comparison.eval_loss_per_run(runs, frames.depth(url))
    print(
        "\n== iso-FLOP: equal training FLOPs (each family's own count; a cheaper one trains more tokens) =="
    )
    table = comparison.iso_flop_table(evals)
    cols = [
        "variant_label",
        "mean",
        "n_seeds",
        "diff",
        "ci_low",
        "ci_high",
        "verdict",
        "tokens",
        "train_flops",
    ]
    with pd.option_context("display.precision", 4):
        print(
            _fitted(table[[c for c in cols if c in table.columns]], False) if not table.empty else "(no pair)"
        )
    runs = runs.drop_duplicates("variant_label")
    print("\n== what each family costs (training FLOPs per token, parameters) ==")
    print(_fitted(runs[["variant_label", "flops_per_token", "n_params"]], False))


def main_families(db: str | None = None, fast: bool = False, artifacts: str = "looplab_artifacts") -> int:
    from looplab.lab.report import write_report

    t0 = time.time()
    study = families_grids(fast)
    names = [g.name for g in study]
    q, rc, failed = _run(study, "demo --study families", db, artifacts, progress_every_s=15.0)
    if rc != 0:
        return rc
    try:
        print_family_tables(q.url, names)
        for fmt in ("html", "md"):
            print(f"report: {write_report(q.url, names, f'{FAMILIES_REPORT}.{fmt}', fmt).absolute()}")
    except Exception as e:  # the tables and the report are what the study is run for: a failure fails it
        print(f"demo --study families: the tables or the report failed: {type(e).__name__}: {e}")
        return 1
    looplab = looplab_command(db)
    print(f"\nwhole demo {time.time() - t0:.0f} s")
    print(f"see it drawn:      {looplab} dashboard   (pages Runs, Compare, Depth)")
    return 0 if failed.empty else 1
