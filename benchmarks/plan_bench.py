"""How good is the planner? Plans a small CPU grid, runs it, and prints estimate and measurement
side by side (a benchmark, not a test: timings on a shared machine are noisy).

On a fresh SQLite database (no history: every row comes from the FLOP model and this machine's
calibration, measured first if not cached) and a local Ray with `--cpus` CPUs:
1. `Queue.plan` of 4 tiny train jobs (lean and parcae x 2 seeds), each job's estimated wall time;
2. submit (which stores the same estimates as `planned_seconds`) and run the queue;
3. per job: the cold estimate (`planned_seconds`), the duration the plan's schedule gives it (without
   the start-up when it starts in a worker process an earlier job left idle), actual (the attempt's
   wall time), actual / scheduled, and the contention it ran under; then the whole grid's planned and
   actual finish time (the plan's includes starting the queue).
Then the same grid with new seeds is planned again: now from `measured` throughput of the run above.

    .venv/bin/python benchmarks/plan_bench.py [--cpus 2] [--tokens 16384]

Target: every ratio within 0.75-1.25 on a quiet machine. Writes benchmarks/results/plan_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray (parallel jobs)")
    parser.add_argument("--tokens", type=int, default=16384, help="training tokens per job")
    args = parser.parse_args(argv)

    import sqlalchemy as sa

    from orchestrator import Grid, Queue

    with tempfile.TemporaryDirectory() as tmp:
        q = Queue(db=Path(tmp) / "plan.db", artifacts=Path(tmp) / "art")
        grid = Grid(
            "plan-bench",
            base={**TRAIN, "tokens": args.tokens},
            sweep={"recipe": ["lean", "parcae"], "seed": [0, 1]},
        )
        t0 = time.time()
        report = q.plan(grid, num_cpus=args.cpus, num_gpus=0)
        print(f"plan ({time.time() - t0:.1f} s, calibration included if it was not cached):")
        print(report.text())
        cal = report.calibration
        if cal is not None:
            print(
                f"calibration: {cal.flops_per_s / 1e9:.2f} GFLOP/s training, {cal.decode_layer_s * 1e3:.2f} ms "
                f"per decode layer application, start-up {cal.startup_s:.1f} s"
            )
        ids = q.submit(grid)
        # what the plan predicts for each job where the schedule put it: a job started in a worker
        # process an earlier job left idle skips the start-up (planned_seconds keeps the cold estimate)
        scheduled = {i: j.end_s - j.start_s for i, j in zip(ids, report.new_jobs(), strict=True)}
        started = time.time()
        q.run(until_empty=True, num_cpus=args.cpus, num_gpus=0, progress=False)
        actual_makespan = time.time() - started
        with q.eng.connect() as conn:
            rows = conn.execute(
                sa.text(
                    "SELECT j.id, j.recipe, j.seed, j.planned_seconds, j.planned_source, "
                    "a.ended_at - a.started_at, r.concurrent_jobs FROM jobs j JOIN attempts a ON a.job_id = j.id "
                    "LEFT JOIN train_results r ON r.job_id = j.id WHERE j.id IN :ids ORDER BY j.id"
                ).bindparams(sa.bindparam("ids", expanding=True)),
                {"ids": ids},
            ).all()
        print(
            f"\n{'job':>4} {'recipe':<8} {'seed':>4} {'cold est.':>10} {'scheduled':>10} {'actual s':>9} "
            f"{'ratio':>6} {'source':<10} {'others beside':>13}"
        )
        out = []
        for job_id, recipe, seed, planned, source, actual, others in rows:
            plan_s = scheduled[job_id]
            ratio = actual / plan_s if plan_s else float("nan")
            print(
                f"{job_id:>4} {recipe:<8} {seed:>4} {planned or float('nan'):>10.1f} {plan_s:>10.1f} "
                f"{actual:>9.1f} {ratio:>6.2f} {source or '-':<10} "
                f"{others if others is not None else '-':>13}"
            )
            out.append(
                {
                    "job": job_id,
                    "recipe": recipe,
                    "seed": seed,
                    "planned_s": planned,
                    "scheduled_s": plan_s,
                    "actual_s": actual,
                    "ratio": ratio,
                    "source": source,
                    "concurrent_jobs": others,
                }
            )
        print(
            f"grid: planned finish {report.makespan_s:.1f} s, actual {actual_makespan:.1f} s, "
            f"ratio {actual_makespan / report.makespan_s:.2f}"
        )
        again = q.plan(
            Grid(
                "plan-bench-2",
                base={**TRAIN, "tokens": args.tokens},
                sweep={"recipe": ["lean", "parcae"], "seed": [2, 3]},
            ),
            num_cpus=args.cpus,
            num_gpus=0,
        )
        print("\nthe same grid with new seeds, planned after the run (measured throughput):")
        print(again.text())
    result = {
        "machine": platform.platform(),
        "cpus": args.cpus,
        "tokens": args.tokens,
        "jobs": out,
        "planned_makespan_s": report.makespan_s,
        "actual_makespan_s": actual_makespan,
        "replanned_s": [j.estimate.seconds for j in again.new_jobs()],
    }
    path = ROOT / "benchmarks" / "results" / "plan_bench.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
