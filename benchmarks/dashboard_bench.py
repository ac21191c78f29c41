"""How fast the dashboard's pages get their data on a big results database.

Generates a SQLite database of N train runs × P metric points each (default 1,000 × 2,000 = 2 M metric
rows, plus results, depth sweeps, round deltas, decode benches, running and failed jobs, iso-time
pairs), then times, per page, exactly the read queries and analysis functions that page calls (cold:
no Streamlit cache), and optionally a full AppTest render of the page. The issue's target: every page
well under 2 s.

    .venv/bin/python benchmarks/dashboard_bench.py [--runs 1000] [--points 2000] [--no-render]

Prints a table and writes benchmarks/results/dashboard_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECIPES = ["parcae", "parcae_per_batch", "fixed4", "fixed8", "lean", "lean_w256", "half_width", "mlp_only",
           "fixed2", "plain"]  # fmt: skip
SIZES = ["tiny", "small"]
LOOPS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]


def build(path: Path, n_runs: int, n_points: int) -> dict:
    """Create and fill the database; returns counts. Bulk inserts with executemany on one sqlite3 connection."""
    from orchestrator.db import dispose_all, engine
    from orchestrator.states import JobStatus
    from orchestrator.variants import VARIANT_COLUMNS, variant_columns

    engine(str(path))  # creates the schema (migrations to head) and the views
    dispose_all()
    t0 = time.perf_counter()
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous=OFF")
    now = time.time()
    db.execute(
        "INSERT INTO grids(id, name, spec, spec_hash, created_at) VALUES (1, 'bench', '{}', 'g', ?)", (now,)
    )
    jobs, deps, results, metrics, latest, depth, deltas = [], [], [], [], [], [], []
    n_val = n_tps = max(1, n_points // 8)
    n_train = n_points - n_val - n_tps
    job_id = 0
    train_ids = []
    variants: dict[tuple[str, str, str], tuple] = {}
    for i in range(n_runs):
        job_id += 1
        recipe, size = RECIPES[i % len(RECIPES)], SIZES[(i // len(RECIPES)) % len(SIZES)]
        seed, budget = i // (len(RECIPES) * len(SIZES) * 5), [1, 2, 4, 8, 16][(i // 20) % 5] * 1_000_000
        status = (
            JobStatus.RUNNING if i % 50 == 7 else JobStatus.FAILED if i % 100 == 3 else JobStatus.SUCCEEDED
        )
        match = train_ids[-5] if (i % 40 == 39 and len(train_ids) > 5) else None
        model = {"loops": 8} if recipe == "fixed4" and i % 3 == 0 else {}  # two variants of fixed4
        cfg = json.dumps(
            {"recipe": recipe, "size": size, "seed": seed, "model": model, "tokens": budget, "i": i}
        )
        key = (recipe, size, json.dumps(model))
        # the columns submission stores (a bench config is no train Spec: the preset's vocabulary)
        if key not in variants:
            columns = variant_columns("train", {"recipe": recipe, "size": size, "model": model})
            variants[key] = tuple(columns[c] for c in VARIANT_COLUMNS)
        bud = json.dumps({"match_time_of": match} if match else {"tokens": budget})
        jobs.append((job_id, 1, "train", cfg, f"t{i}", recipe, size, seed, status, bud,
                     None if match else budget, 100.0 if match else None, now - 9000, now - 8000,
                     now - 10 if status != JobStatus.RUNNING else None, now, 30.0, 100.0, 60.0,
                     "Traceback ...\nRuntimeError: bench failure" if status == JobStatus.FAILED else None,
                     *variants[key]))  # fmt: skip
        if match:
            deps.append((job_id, match))
        train_ids.append(job_id)
        final = 3.0 + 0.01 * (i % len(RECIPES)) + 0.001 * seed
        for k in range(n_train):
            step = k + 1
            metrics.append((job_id, "train_loss", step, step * 1000, step * 0.5, final + 1.0 / step))
        for k in range(n_val):
            step = (k + 1) * (n_train // n_val)
            metrics.append((job_id, "val_loss", step, step * 1000, step * 0.5, final + 1.0 / step))
            metrics.append((job_id, "tokens_per_s", step, step * 1000, step * 0.5, 2000.0 + i % 7))
        latest += [(job_id, "train_loss", n_train, n_train * 1000, n_train * 0.5, final),
                   (job_id, "val_loss", n_train, n_train * 1000, n_train * 0.5, final),
                   (job_id, "tokens_per_s", n_train, n_train * 1000, n_train * 0.5, 2000.0)]  # fmt: skip
        if status == JobStatus.SUCCEEDED:
            results.append((job_id, n_train, budget, 100.0, 2000.0 + i % 7, final, final))
    for tid in list(train_ids):
        job_id += 1
        jobs.append((job_id, 1, "depth_sweep", "{}", f"d{tid}", None, None, None, JobStatus.SUCCEEDED, None, None,
                     None, now, now, now, now, None, None, None, None, *jobs[tid - 1][-len(VARIANT_COLUMNS):]))  # fmt: skip
        deps.append((job_id, tid))
        depth += [(job_id, n, 3.0 + abs(n - 8) * 0.01) for n in LOOPS]
        deltas += [(job_id, 8, r, 0.5 / r) for r in range(1, 9)]
    job_id += 1
    bench_columns = [
        variant_columns("decode_bench", {"recipe": "parcae", "size": "small"})[c] for c in VARIANT_COLUMNS
    ]
    jobs.append((job_id, 1, "decode_bench", "{}", "dec", "parcae", "small", None, JobStatus.SUCCEEDED, None, None,
                 None, now, now, now, now, None, None, None, None, *bench_columns))  # fmt: skip
    decode = [(job_id, a, "small", c, b, 1.0 + len(a) / 10 * c / 2000, 1.0, 2.0, c * b / 100, "cuda", "bfloat16", 1)
              for a in RECIPES for c in (2000, 16000) for b in (1, 8, 64)]  # fmt: skip
    db.executemany(
        "INSERT INTO jobs(id, grid_id, kind, config, config_hash, recipe, size, seed, status, budget, budget_tokens,"
        " budget_time_s, created_at, started_at, finished_at, heartbeat_at, progress_done, progress_total, eta_s,"
        f" error, {', '.join(VARIANT_COLUMNS)}, priority, attempts, max_attempts)"
        f" VALUES ({', '.join('?' * (20 + len(VARIANT_COLUMNS)))},0,1,3)",
        jobs,
    )
    db.executemany("INSERT INTO job_deps(job_id, depends_on) VALUES (?,?)", deps)
    db.executemany(
        "INSERT INTO metrics(job_id, key, step, tokens, wall_s, value) VALUES (?,?,?,?,?,?)", metrics
    )
    db.executemany(
        "INSERT INTO latest_metrics(job_id, key, step, tokens, wall_s, value) VALUES (?,?,?,?,?,?)", latest
    )
    db.executemany("INSERT INTO train_results(job_id, steps, tokens, train_seconds, tokens_per_s, final_train_loss,"
                   " final_val_loss) VALUES (?,?,?,?,?,?,?)", results)  # fmt: skip
    db.executemany("INSERT INTO depth_evals(job_id, loops, val_loss) VALUES (?,?,?)", depth)
    db.executemany("INSERT INTO round_deltas(job_id, loops, round, rel_change) VALUES (?,?,?,?)", deltas)
    db.executemany("INSERT INTO decode_benches(job_id, arch, size, context_len, batch_size, ms_per_token, ms_p10,"
                   " ms_p90, kv_cache_mb, device, dtype, cuda_graph) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", decode)  # fmt: skip
    db.commit()
    db.execute("ANALYZE")
    db.close()
    return {"jobs": len(jobs), "metric_rows": len(metrics), "build_s": round(time.perf_counter() - t0, 2)}


def page_loads(url: str) -> dict:
    """Per page: the frames and analysis calls the page makes (see dashboard/views/*.py), uncached."""
    from analysis import comparison, curves, variants
    from dashboard import listing
    from orchestrator import frames
    from orchestrator.states import JobStatus

    def queue():
        jobs = frames.jobs(url)
        listing.status_counts(jobs)
        listing.running_jobs(
            jobs, frames.latest(url, jobs.loc[jobs["status"] == JobStatus.RUNNING, "job_id"])
        )
        listing.recent_failures(jobs)

    def runs():
        r = frames.runs(url)
        r["budget"] = variants.budget_labels(r)
        shown = r[r["status"].isin([JobStatus.RUNNING, JobStatus.SUCCEEDED])].tail(60)
        c = frames.curves(url, shown["job_id"], ("val_loss",)).merge(
            shown[["job_id", "recipe", "size", "budget"]]
        )
        c["config"] = c["recipe"] + c["size"] + c["budget"]
        curves.curve_bands(c, by=["config"], x="tokens")
        variants.seed_aggregate(r, "final_val_loss", by=["grid", "recipe", "size", "budget"])

    def compare():
        r = frames.runs(url)
        done = r[r["status"] == JobStatus.SUCCEEDED]
        ev = comparison.eval_loss_per_run(done, frames.depth(url))
        comparison.iso_data_matrix(comparison.iso_data_table(ev, reference="parcae"))
        pairs = comparison.iso_time_pairs(done)
        comparison.iso_time_summary(pairs)
        ids = sorted(set(pairs["job_id"]) | set(pairs["ref_job_id"]))
        curves.wall_time_curves(frames.curves(url, ids, ("val_loss",)), r, done["job_id"])
        comparison.throughput_table(done, reference="parcae")

    def depth():
        curves.depth_curves(frames.depth(url))
        curves.round_delta_curves(frames.round_deltas(url), loops=8)

    def decode():
        comparison.decode_table(frames.decode(url), reference="parcae")

    def sql():
        frames.sql_query(url, "SELECT recipe, size, seed, final_val_loss, best_loops, tokens_per_s FROM runs "
                         "ORDER BY final_val_loss")  # fmt: skip

    return {"queue": queue, "runs": runs, "compare": compare, "depth": depth, "decode": decode, "sql": sql}


def render(url: str, page: str) -> float:
    """Seconds for one AppTest run of `page` on a cold Streamlit cache (the app's imports are warm)."""
    import logging

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    logging.getLogger("streamlit").setLevel(logging.ERROR)  # "no runtime" warnings of bare mode
    os.environ["LOOPLAB_DB"] = url
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
    at.run()  # lands on the Queue page
    if page != "queue":
        at.switch_page(f"views/{page}.py")
    st.cache_data.clear()
    t0 = time.perf_counter()
    at.run()
    dt = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(f"{page}: {at.exception[0].message}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--points", type=int, default=2000, help="metric points per run")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions per page (median reported)")
    ap.add_argument("--no-render", action="store_true", help="skip the AppTest renders")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dashboard_bench.json"))
    args = ap.parse_args()
    from orchestrator.db import dispose_all, resolve_url

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        info = build(path, args.runs, args.points)
        info["db_mb"] = round(path.stat().st_size / 2**20, 1)
        print(f"database: {info['jobs']:,} jobs, {info['metric_rows']:,} metric rows, {info['db_mb']} MB, "
              f"built in {info['build_s']} s")  # fmt: skip
        url = resolve_url(str(path))
        rows = []
        for page, fn in page_loads(url).items():
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            row = {
                "page": page,
                "data_s_median": round(statistics.median(times), 3),
                "data_s_max": round(max(times), 3),
            }
            if not args.no_render:
                row["render_s"] = round(render(url, page), 3)
            rows.append(row)
        dispose_all()
    print(f"\n{'page':<10}{'data median s':>15}{'data max s':>12}{'render s':>10}")
    for r in rows:
        print(
            f"{r['page']:<10}{r['data_s_median']:>15.3f}{r['data_s_max']:>12.3f}{r.get('render_s', float('nan')):>10.3f}"
        )
    out = {"runs": args.runs, "points_per_run": args.points, **info, "pages": rows,
           "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({"bench": "dashboard", "pages": {r["page"]: r for r in rows}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
