"""How good is the planner? Plans a small CPU grid of every kind it prices, runs it, and prints estimate
and measurement side by side, per job and per kind (a benchmark, not a test: timings on a shared machine
are noisy).

On a fresh SQLite database and a local Ray with `--cpus` CPUs, two grids of tiny train jobs (lean and
parcae x 2 seeds), each followed by a depth sweep and a decode benchmark:
1. the calibration grid, with no history: every estimate from the FLOP model and this machine's
   calibration (measured first if not cached); planned, submitted (which stores the same estimates as
   `planned_seconds`) and run;
2. the same grid with new seeds, now planned from the first one's history (`measured` train throughput,
   `finished` sweeps and decode benches), submitted and run; with `--new-recipes` the first grid is
   fixed4's alone and the second lean, plain and parcae's, recipes the calibration never ran, priced by
   the FLOP model times this machine's factor per kind learnt from the first (`flop_fit`).
Per job: the estimate stored at submission (`planned_seconds`, what the dashboard's Plan page compares),
the duration the plan's schedule gives it (without the start-up when it starts in a worker process an
earlier job left idle), actual (the attempt's wall time), actual / planned and the contention it ran
under; per kind and grid the median of actual / planned; the grids' planned and actual finish time.

    .venv/bin/python benchmarks/plan_bench.py [--cpus 2] [--tokens 16384]

Target: each kind's median actual / planned within 0.65-1.35 (docs/planning.md has the last run's
figures). Writes benchmarks/results/plan_bench.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per job, as the calibration assumes

TRAIN = {
    "size": "tiny",
    "seq_len": 64,
    "batch_size": 8,
    "eval_every": 16,
    "eval_tokens": 1024,
    "ckpt_every": 16,
    "data": {"corpus": "offline", "tokenizer": "byte"},
}


FOLLOW = {
    "depth_sweep": {"loops": [1, 2, 4, 8], "eval_tokens": 1024, "batch_size": 8},
    "decode_bench": {"context_lens": [64, 256], "batch_sizes": [1, 4], "warmup": 2, "steps": 6},
}
KINDS = ("train", "depth_sweep", "decode_bench")
TARGET = (0.65, 1.35)  # each kind's median actual / planned


def _grid(name: str, tokens: int, seeds: list[int], contexts: list[int], recipes: list[str] | None = None):
    """Train jobs with their follow-ups; a decode bench times the architecture, whatever the seed, so
    the second grid gives it other context lengths (else it is the first grid's, not run again) and
    its estimate scales the first one's wall time by the FLOPs."""
    from looplab import Grid

    return Grid(
        name,
        base={**TRAIN, "tokens": tokens},
        sweep={"recipe": recipes or ["lean", "parcae"], "seed": seeds},
        then=list(FOLLOW),
        follow={**FOLLOW, "decode_bench": {**FOLLOW["decode_bench"], "context_lens": contexts}},
    )


def _run_grid(q, grid, cpus: int) -> dict:
    """Plan, submit and run `grid`; per job and per kind, planned against actual."""
    import sqlalchemy as sa

    t0 = time.time()
    report = q.plan(grid, num_cpus=cpus, num_gpus=0)
    print(f"plan of {grid.name} ({time.time() - t0:.1f} s, calibration included if it was not cached):")
    print(report.text())
    ids = q.submit(grid)
    # what the plan predicts for each job where the schedule put it: a job started in a worker
    # process an earlier job left idle skips the start-up (planned_seconds, stored at submission by the
    # same schedule on this machine's CPUs, does too; with --cpus below the machine's they may differ)
    new = [j for j in report.new_jobs() if j.status != "present"]  # a job already run is not submitted again
    scheduled = {i: j.end_s - j.start_s for i, j in zip(ids, new, strict=True)}
    started = time.time()
    q.run(until_empty=True, num_cpus=cpus, num_gpus=0, progress=False)
    actual_makespan = time.time() - started
    with q.eng.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT j.id, j.kind, j.recipe, j.seed, j.planned_seconds, j.planned_source, "
                "a.ended_at - a.started_at, r.concurrent_jobs FROM jobs j JOIN attempts a ON a.job_id = j.id "
                "LEFT JOIN train_results r ON r.job_id = j.id WHERE j.id IN :ids ORDER BY j.id"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": ids},
        ).all()
    print(
        f"\n{'job':>4} {'kind':<13} {'recipe':<8} {'seed':>4} {'planned':>8} {'scheduled':>10} {'actual s':>9} "
        f"{'ratio':>6} {'source':<11} {'others beside':>13}"
    )
    jobs = []
    for job_id, kind, recipe, seed, planned, source, actual, others in rows:
        ratio = actual / planned if planned else float("nan")
        print(
            f"{job_id:>4} {kind:<13} {recipe:<8} {'-' if seed is None else seed:>4} {planned or float('nan'):>8.1f} "
            f"{scheduled[job_id]:>10.1f} {actual:>9.1f} {ratio:>6.2f} {source or '-':<11} "
            f"{others if others is not None else '-':>13}"
        )
        jobs.append(
            {"job": job_id, "kind": kind, "recipe": recipe, "seed": seed, "planned_s": planned}
            | {"scheduled_s": scheduled[job_id], "actual_s": actual, "ratio": ratio, "source": source}
            | {"concurrent_jobs": others}
        )
    medians = {
        kind: statistics.median(j["ratio"] for j in jobs if j["kind"] == kind and math.isfinite(j["ratio"]))
        for kind in KINDS
        if any(j["kind"] == kind and math.isfinite(j["ratio"]) for j in jobs)
    }
    held = {k: TARGET[0] <= v <= TARGET[1] for k, v in medians.items()}
    print(
        "median actual / planned: "
        + ", ".join(f"{k} {v:.2f}{'' if held[k] else ' (!)'}" for k, v in medians.items())
    )
    print(
        f"grid: planned finish {report.makespan_s:.1f} s, actual {actual_makespan:.1f} s, "
        f"ratio {actual_makespan / report.makespan_s:.2f}\n"
    )
    return {
        "jobs": jobs,
        "median_ratio": medians,
        "within_target": held,
        "planned_makespan_s": report.makespan_s,
        "actual_makespan_s": actual_makespan,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray (parallel jobs)")
    parser.add_argument("--tokens", type=int, default=16384, help="training tokens per job")
    parser.add_argument(
        "--new-recipes",
        action="store_true",
        help="calibrate on fixed4 alone, then run lean, plain and parcae, which the calibration never ran "
        "(their estimates come from the FLOP model x this machine's factor, `flop_fit`)",
    )
    args = parser.parse_args(argv)
    first_recipes, second_recipes = (
        (["fixed4"], ["lean", "plain", "parcae"]) if args.new_recipes else (None, None)
    )

    from looplab import Queue

    with tempfile.TemporaryDirectory() as tmp:
        q = Queue(db=Path(tmp) / "plan.db", artifacts=Path(tmp) / "art")
        print("== 1. the calibration grid: no history (the FLOP model, this machine's calibration) ==")
        first = _run_grid(q, _grid("plan-bench", args.tokens, [0, 1], [64, 256], first_recipes), args.cpus)
        print("== 2. new seeds (or recipes never run), planned from the first one's history ==")
        second = _run_grid(
            q, _grid("plan-bench-2", args.tokens, [2, 3], [128, 512], second_recipes), args.cpus
        )
    result = {
        "machine": platform.platform(),
        "load_average": os.getloadavg(),
        "cpus": args.cpus,
        "tokens": args.tokens,
        "new_recipes": args.new_recipes,
        "calibration_grid": first,
        "second_grid": second,
    }
    path = ROOT / "benchmarks" / "results" / "plan_bench.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path.relative_to(ROOT)}")
    return 0 if all(second["within_target"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
