"""`looplab demo`: the whole product in one command, on local Ray and a SQLite file.

Submits recipes parcae, fixed4, lean and plain x 2 seeds on the `small` model and the embedded
offline corpus (byte tokenizer: no tokenizer training, so every second goes to the models), each
with its depth sweep and decode benchmark, plus one iso-time run (parcae given the training time of
lean seed 0); runs the queue with live progress; prints the iso-data and iso-time tables.
Sized to finish in about 10 minutes on 2 CPU cores (`--fast`: a 1-2 minute smoke test).
Running it again reuses what is done (submission is idempotent, finished jobs are kept).
"""

from __future__ import annotations

import os
import time

from orchestrator.grid import Grid
from orchestrator.states import JobStatus

DATA = {"corpus": "offline", "tokenizer": "byte"}
FULL = {
    # lean first: the iso-time run waits for lean seed 0, so that should finish early
    "recipes": ["lean", "parcae", "fixed4", "plain"], "seeds": [0, 1],
    "train": {"size": "small", "seq_len": 64, "batch_size": 8, "tokens": 8 * 64 * 120, "eval_every": 20,
              "eval_tokens": 2048, "ckpt_every": 40, "calib_steps": 4, "data": DATA},
    "depth_sweep": {"loops": [1, 2, 4, 8, 12, 16], "eval_tokens": 2048, "batch_size": 8},
    "decode_bench": {"context_lens": [64, 256], "batch_sizes": [1, 4], "warmup": 2, "steps": 6},
}  # fmt: skip
FAST = {
    "recipes": ["lean", "parcae"], "seeds": [0],
    "train": {"size": "tiny", "seq_len": 32, "batch_size": 4, "tokens": 4 * 32 * 10, "eval_every": 5,
              "eval_tokens": 512, "ckpt_every": 5, "calib_steps": 2, "data": DATA},
    "depth_sweep": {"loops": [1, 2, 4, 8], "eval_tokens": 512, "batch_size": 4},
    "decode_bench": {"context_lens": [64], "batch_sizes": [1], "warmup": 1, "steps": 3},
}  # fmt: skip


def grids(fast: bool = False) -> list[Grid]:
    """The demo grids: the iso-data grid and the iso-time run that refers to it."""
    p = FAST if fast else FULL
    follow = {"depth_sweep": p["depth_sweep"], "decode_bench": p["decode_bench"]}
    main = Grid("demo-fast" if fast else "demo", base=p["train"],
                sweep={"recipe": p["recipes"], "seed": p["seeds"]},
                then=["depth_sweep", "decode_bench"], follow=follow)  # fmt: skip
    iso_base = {k: v for k, v in p["train"].items() if k != "tokens"}
    # priority 1: the iso-time run starts as soon as its reference is done, not at the very end
    iso = Grid(("demo-fast" if fast else "demo") + "-isotime",
               base={**iso_base, "recipe": "parcae", "seed": 0,
                     "budget": {"match_time_of": {"recipe": "lean", "seed": 0}}},
               then=["depth_sweep"], follow={"depth_sweep": p["depth_sweep"]},
               priority=1)  # fmt: skip
    return [main, iso]


def print_tables(url: str) -> None:
    """The iso-data and iso-time comparisons, computed by the dashboard's tested functions."""
    import pandas as pd

    from dashboard import analysis, data

    runs = data.runs(url)
    evals = analysis.eval_loss_per_run(runs, data.depth(url))
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.precision", 4):
        print("\n== iso-data: equal model size and tokens (looped recipes at their best loop count) ==")
        iso_data = analysis.iso_data_table(evals)
        cols = [c for c in iso_data.columns if c not in ("size", "budget_tokens", "std", "loop_rule")]
        print(iso_data[cols].to_string(index=False) if not iso_data.empty else "(no finished runs)")
        print("\n== iso-time: equal training wall time (final validation loss) ==")
        pairs = analysis.iso_time_pairs(runs)
        cols = ["recipe", "seed", "ref_recipe", "ref_seed", "final_val_loss", "ref_final_val_loss", "diff",
                "verdict", "train_seconds", "ref_train_seconds", "tokens", "ref_tokens"]  # fmt: skip
        print(pairs[cols].to_string(index=False) if not pairs.empty else "(no finished iso-time pair)")


def main(db: str | None = None, fast: bool = False, artifacts: str = "looplab_artifacts") -> int:
    from orchestrator.api import Queue

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per job: 2 jobs on 2 cores, no thrashing
    q = Queue(db=db, artifacts=artifacts)
    t0 = time.time()
    ids = q.submit(grids(fast))
    print(
        f"demo: {len(ids)} jobs ({len(q.last_added)} new) in {q.url}; artifacts in {q.artifacts.absolute()}"
    )
    rc = q.run(until_empty=True, num_cpus=os.cpu_count() or 2, num_gpus=None, progress_every_s=10.0)
    st = q.status()
    st = st[st["id"].isin(ids)]
    counts = {k: int(v) for k, v in st["status"].value_counts().items()}
    print(f"\ndemo: {counts} in {time.time() - t0:.0f} s")
    if rc != 0:
        print("demo stopped; finished work is kept: run `looplab demo` again to continue where it stopped")
        return rc
    failed = st[st["status"] == JobStatus.FAILED]
    for r in failed.itertuples():
        print(f"  job {r.id} ({r.kind}) failed: {r.error}   (details: looplab logs {r.id})")
    try:
        print_tables(q.url)
    except Exception as e:  # the tables are a summary; never hide the run's outcome behind them
        print(f"(dashboard tables unavailable: {type(e).__name__}: {e}); the runs view instead:")
        print(q.results("train_results")[["job_id", "tokens", "train_seconds", "final_val_loss"]].to_string())
    print("\nopen the dashboard: looplab dashboard" + (f" --db {db}" if db else ""))
    print('query the results:  looplab sql "SELECT recipe, seed, final_val_loss FROM runs"')
    return 0 if failed.empty else 1
