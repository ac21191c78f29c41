"""How fast the dashboard's pages get their data on a big results database, on SQLite and PostgreSQL.

Generates a database of N train runs × P metric points each (default 1,000 × 2,000 = 2 M metric rows;
a study is 100 × 300,000 = 30 M), plus results, depth sweeps, round deltas, decode benches, running
and failed jobs, iso-time pairs; then times, per page, exactly the read queries and analysis functions
that page calls (cold: no Streamlit cache), and optionally a full AppTest render of the page (a
refresh: the second run of the page, its data cache cleared). The target: every page under 1 s at
100 × 300,000 on both backends.

The row `runs (full scan)` times the Runs page's data with the curve read of before revision 0010 (a
window function over every point of every curve drawn, kept here as `full_scan_curves`), on the same
database: the before/after ratio in one run.

    .venv/bin/python benchmarks/dashboard_bench.py [--runs 1000] [--points 2000]
        [--backend sqlite|postgresql|both] [--url URL] [--no-render] [--repeat 3]

`--backend postgresql` starts a throw-away server (tests/pg.py, needs the PostgreSQL binaries);
`--url` benchmarks in a database you give instead (it must be empty). Metric rows are generated in
one transaction, streamed (executemany on SQLite, COPY on PostgreSQL). Prints a table per backend and
writes benchmarks/results/dashboard_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RECIPES = [
    "parcae",
    "parcae_per_batch",
    "fixed4",
    "fixed8",
    "lean",
    "lean_w256",
    "half_width",
    "mlp_only",
    "fixed2",
    "plain",
]
SIZES = ["tiny", "small"]
LOOPS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
PAGES = ("queue", "runs", "compare", "depth", "decode", "sql", "plan", "tasks", "scaling", "extrapolation")
METRIC_COLUMNS = ("job_id", "key", "step", "tokens", "wall_s", "value", "curve_level")


# ---------------------------------------------------------------- the database


def _train_jobs(n_runs: int) -> list[dict]:
    """The train runs' jobs rows (running, failed and succeeded ones, iso-time pairs, two variants of a
    recipe), with the columns submission stores."""
    from looplab.orchestrator.states import JobStatus
    from looplab.orchestrator.variants import VARIANT_COLUMNS, variant_columns

    now = time.time()
    variants: dict[tuple, dict] = {}
    jobs = []
    for i in range(n_runs):
        recipe, size = RECIPES[i % len(RECIPES)], SIZES[(i // len(RECIPES)) % len(SIZES)]
        seed, budget = i // (len(RECIPES) * len(SIZES) * 5), [1, 2, 4, 8, 16][(i // 20) % 5] * 1_000_000
        status = (
            JobStatus.RUNNING if i % 50 == 7 else JobStatus.FAILED if i % 100 == 3 else JobStatus.SUCCEEDED
        )
        match = i - 4 if (i % 40 == 39 and i > 5) else None  # the job id of the run 5 before
        model = {"loops": 8} if recipe == "fixed4" and i % 3 == 0 else {}  # two variants of fixed4
        key = (recipe, size, json.dumps(model))
        if key not in variants:  # the columns submission stores (a bench config: the preset's vocabulary)
            columns = variant_columns("train", {"recipe": recipe, "size": size, "model": model})
            variants[key] = {c: columns.get(c) for c in VARIANT_COLUMNS}
        jobs.append(
            dict(
                id=i + 1,
                grid_id=1,
                kind="train",
                recipe=recipe,
                size=size,
                seed=seed,
                status=status,
                config=json.dumps(
                    {"recipe": recipe, "size": size, "seed": seed, "model": model, "tokens": budget, "i": i}
                ),
                config_hash=f"t{i}",
                budget=json.dumps({"match_time_of": match} if match else {"tokens": budget}),
                budget_tokens=None if match else budget,
                budget_time_s=100.0 if match else None,
                created_at=now - 9000,
                started_at=now - 8000,
                finished_at=None if status == JobStatus.RUNNING else now - 10,
                heartbeat_at=now,
                progress_done=30.0,
                progress_total=100.0,
                eta_s=60.0,
                priority=0,
                attempts=1,
                max_attempts=3,
                error="Traceback ...\nRuntimeError: bench failure" if status == JobStatus.FAILED else None,
                **variants[key],
            )
        )
    return jobs


def _curves(job: dict, n_points: int) -> tuple[list[tuple], list[dict]]:
    """A run's metric rows (train_loss every step, val_loss and tokens_per_s every 8th point's step),
    each with its level (analysis.curves.curve_level, as the writer stores it), and its latest_metrics
    rows (the last point of each curve and the count)."""
    from looplab.analysis.curves import curve_level

    i, job_id = job["id"] - 1, job["id"]
    final = 3.0 + 0.01 * (i % len(RECIPES)) + 0.001 * job["seed"]
    n_val = max(1, n_points // 8)
    n_train = max(1, n_points - 2 * n_val)
    every = max(1, n_train // n_val)
    evals = range(every, every * n_val + 1, every)
    rows, latest = [], []
    for key, steps, value in (
        ("train_loss", range(1, n_train + 1), None),
        ("val_loss", evals, None),
        ("tokens_per_s", evals, 2000.0 + i % 7),
    ):
        curve = [
            (job_id, key, s, s * 1000, s * 0.5, final + 1.0 / s if value is None else value, curve_level(k))
            for k, s in enumerate(steps)
        ]
        rows += curve
        latest.append(dict(zip(METRIC_COLUMNS[:6], curve[-1][:6], strict=True), points=len(curve)))
    return rows, latest


def _insert_metrics(cur, rows: list[tuple], postgres: bool) -> None:
    """Metric rows through the driver: COPY on PostgreSQL, executemany on SQLite."""
    columns = ", ".join(METRIC_COLUMNS)
    if postgres:
        with cur.copy(f"COPY metrics ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
    else:
        cur.executemany(
            f"INSERT INTO metrics ({columns}) VALUES ({', '.join('?' * len(METRIC_COLUMNS))})", rows
        )


def build(url: str, n_runs: int, n_points: int) -> dict:
    """Create (migrate) and fill the database at `url`; returns counts, its size and the build time."""
    import sqlalchemy as sa

    from looplab.orchestrator import schema
    from looplab.orchestrator.db import dispose_all, engine
    from looplab.orchestrator.states import JobStatus
    from looplab.orchestrator.variants import VARIANT_COLUMNS, variant_columns

    eng = engine(url)  # creates the schema (migrations to head) and the views
    postgres = eng.dialect.name == "postgresql"
    t0 = time.perf_counter()
    now = time.time()
    train = _train_jobs(n_runs)
    sweeps = [
        dict(
            j,
            id=n_runs + j["id"],
            kind="depth_sweep",
            config="{}",
            config_hash=f"d{j['id']}",
            status=JobStatus.SUCCEEDED,
            budget=None,
            budget_tokens=None,
            budget_time_s=None,
            progress_done=None,
            progress_total=None,
            eta_s=None,
            error=None,
            finished_at=now,
        )
        for j in train
    ]
    bench_columns = variant_columns("decode_bench", {"recipe": "parcae", "size": "small"})
    bench = dict(
        sweeps[0],
        id=2 * n_runs + 1,
        kind="decode_bench",
        recipe="parcae",
        size="small",
        seed=None,
        config_hash="dec",
        **{c: bench_columns.get(c) for c in VARIANT_COLUMNS},
    )
    deps = [
        {"job_id": j["id"], "depends_on": json.loads(j["budget"])["match_time_of"]}
        for j in train
        if "match_time_of" in j["budget"]
    ]
    deps += [{"job_id": s["id"], "depends_on": s["id"] - n_runs} for s in sweeps]
    with eng.begin() as conn:
        conn.execute(
            schema.GridRow.__table__.insert(),
            [dict(id=1, name="bench", spec="{}", spec_hash="g", created_at=now)],
        )
        conn.execute(schema.Job.__table__.insert(), [*train, *sweeps, bench])
        conn.execute(schema.JobDep.__table__.insert(), deps)
    latest: list[dict] = []
    n_metrics = 0
    raw = eng.raw_connection()  # one transaction, rows streamed through the driver
    try:
        cur = raw.cursor()
        if not postgres:
            cur.execute("PRAGMA synchronous=OFF")
        for job in train:
            rows, last = _curves(job, n_points)
            _insert_metrics(cur, rows, postgres)
            latest += last
            n_metrics += len(rows)
        raw.commit()
    finally:
        raw.close()
    results = [
        dict(
            job_id=j["id"],
            steps=n_points,
            tokens=j["budget_tokens"] or 0,
            train_seconds=100.0,
            tokens_per_s=2000.0 + i % 7,
            final_train_loss=latest[3 * i]["value"],
            final_val_loss=latest[3 * i + 1]["value"],
        )
        for i, j in enumerate(train)
        if j["status"] == JobStatus.SUCCEEDED
    ]
    depth = [dict(job_id=s["id"], loops=n, val_loss=3.0 + abs(n - 8) * 0.01) for s in sweeps for n in LOOPS]
    deltas = [dict(job_id=s["id"], loops=8, round=r, rel_change=0.5 / r) for s in sweeps for r in range(1, 9)]
    decode = [
        dict(
            job_id=bench["id"],
            arch=a,
            size="small",
            context_len=c,
            batch_size=b,
            ms_per_token=1.0 + len(a) / 10 * c / 2000,
            ms_p10=1.0,
            ms_p90=2.0,
            kv_cache_mb=c * b / 100,
            device="cuda",
            dtype="bfloat16",
            cuda_graph=True,
        )
        for a in RECIPES
        for c in (2000, 16000)
        for b in (1, 8, 64)
    ]
    with eng.begin() as conn:
        for model, rows in (
            (schema.LatestMetric, latest),
            (schema.TrainResult, results),
            (schema.DepthEval, depth),
            (schema.RoundDelta, deltas),
            (schema.DecodeBench, decode),
        ):
            conn.execute(model.__table__.insert(), rows)
    with eng.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.exec_driver_sql("VACUUM ANALYZE" if postgres else "ANALYZE")
        size = (
            conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()
            if postgres
            else Path(sa.make_url(url).database).stat().st_size
        )
    dispose_all()
    return {
        "jobs": len(train) + len(sweeps) + 1,
        "metric_rows": n_metrics,
        "db_mb": round(size / 2**20, 1),
        "build_s": round(time.perf_counter() - t0, 2),
    }


# ---------------------------------------------------------------- the pages' reads


def full_scan_curves(url: str, job_ids, keys, max_points: int) -> object:
    """The curve read before revision 0010, for the before/after ratio: every point of each curve
    numbered by a window function, then an even stride ceil((n-1)/(m-1)) kept."""
    import pandas as pd
    from sqlalchemy import bindparam, text

    from looplab.orchestrator import frames

    m = max(2, int(max_points))
    stmt = text(f"""
        SELECT job_id, key, step, tokens, wall_s, value FROM (
            SELECT job_id, key, step, tokens, wall_s, value,
                   ROW_NUMBER() OVER (PARTITION BY job_id, key ORDER BY step) AS rn,
                   COUNT(*) OVER (PARTITION BY job_id, key) AS n
            FROM metrics WHERE job_id IN :ids AND key IN :keys
        ) t
        WHERE rn = n OR (rn - 1) % (CASE WHEN n <= {m} THEN 1 ELSE (n + {m} - 3) / ({m} - 1) END) = 0
        ORDER BY job_id, key, step
        """).bindparams(bindparam("ids", expanding=True), bindparam("keys", expanding=True))
    with frames.engine(url).connect() as conn:
        return pd.read_sql(stmt, conn, params={"ids": [int(i) for i in job_ids], "keys": list(keys)})


def page_loads(url: str) -> dict:
    """Per page: the frames and analysis calls the page makes (see dashboard/views/*.py), uncached."""
    from looplab.analysis import comparison, curves, extrapolation, iso_depth, tasks, variants
    from looplab.dashboard import listing
    from looplab.orchestrator import frames
    from looplab.orchestrator.frames import planned_vs_actual
    from looplab.orchestrator.states import JobStatus

    def queue():
        jobs = frames.jobs(url)
        listing.status_counts(jobs)
        listing.running_jobs(
            jobs, frames.latest(url, jobs.loc[jobs["status"] == JobStatus.RUNNING, "job_id"])
        )
        listing.recent_failures(jobs)

    def runs(read=frames.curves):
        r = variants.with_variants(frames.runs(url))
        r["budget"] = variants.budget_labels(r)
        shown = r[r["status"].isin([JobStatus.RUNNING, JobStatus.SUCCEEDED])]
        ids = [int(i) for i in shown["job_id"]]
        frames.depth_metric_keys(url, ids)
        points = curves.points_per_curve(len(ids), most=frames.MAX_POINTS)  # the page's total: the default
        labels = shown[["job_id"]].assign(
            config=curves.join_labels(shown, ["variant_label", "size", "budget"]).to_numpy()
        )
        c = read(url, ids, ("val_loss",), points).merge(labels, on="job_id")
        curves.curve_bands(
            c, by=["config"], x="tokens", bins=max(20, min(200, 5000 // c["config"].nunique()))
        )
        variants.seed_aggregate(
            r, "final_val_loss", by=["grid", "variant_id", "variant_label", "size", "budget"]
        )

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
        frames.sql_query(
            url,
            "SELECT recipe, size, seed, final_val_loss, best_loops, tokens_per_s FROM runs "
            "ORDER BY final_val_loss",
        )

    def plan():
        planned_vs_actual(frames.engine(url))

    def tasks_page():
        scores = frames.task_scores(url)
        if not scores.empty:
            tasks.accuracy_curves(scores)

    def scaling():
        r = frames.runs(url)
        iso_depth.runs_for_fit(r[(r["recipe"] == "iso_depth") & (r["status"] == JobStatus.SUCCEEDED)])

    def extrapolation_page():
        frames.runs(url)
        extrapolation.loss_curves(frames.depth(url))
        frames.task_scores(url)
        frames.round_deltas(url)
        frames.round_interactions(url)

    return {
        "queue": queue,
        "runs": runs,
        "runs (full scan)": lambda: runs(full_scan_curves),
        "compare": compare,
        "depth": depth,
        "decode": decode,
        "sql": sql,
        "plan": plan,
        "tasks": tasks_page,
        "scaling": scaling,
        "extrapolation": extrapolation_page,
    }


def render(url: str, page: str) -> float:
    """Seconds for one AppTest run of `page` as a refresh sees it: the process warm (the page ran once:
    imports, Altair's schema), Streamlit's data cache cleared, so every read of the page counts."""
    import logging

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    logging.getLogger("streamlit").setLevel(logging.ERROR)  # "no runtime" warnings of bare mode
    os.environ["LOOPLAB_DB"] = url
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=300)
    at.run()  # lands on the Queue page
    if page != "queue":
        at.switch_page(f"views/{page}.py")
        at.run()
    st.cache_data.clear()
    t0 = time.perf_counter()
    at.run()
    dt = time.perf_counter() - t0
    if at.exception:
        raise RuntimeError(f"{page}: {at.exception[0].message}")
    return dt


def bench(url: str, args) -> dict:
    """Build the database at `url`, time every page's data (and render); the results as a dict."""
    from looplab.orchestrator.db import dispose_all

    info = build(url, args.runs, args.points)
    print(
        f"database: {info['jobs']:,} jobs, {info['metric_rows']:,} metric rows, {info['db_mb']:,} MB, "
        f"built in {info['build_s']} s",
        flush=True,
    )
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
        if not args.no_render and page in PAGES:
            row["render_s"] = round(render(url, page), 3)
        rows.append(row)
        print(
            f"  {page:<18}{row['data_s_median']:>8.3f} s data{row.get('render_s', float('nan')):>8.3f} s render",
            flush=True,
        )
    dispose_all()
    return {**info, "pages": rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--points", type=int, default=2000, help="metric points per run")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="sqlite")
    ap.add_argument(
        "--url", default=None, help="an empty database to fill and benchmark (instead of --backend)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions per page (median reported)")
    ap.add_argument("--no-render", action="store_true", help="skip the AppTest renders")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "dashboard_bench.json"))
    args = ap.parse_args()
    from looplab.orchestrator.db import resolve_url

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.url:
            targets = {"url": lambda: resolve_url(args.url)}
        else:
            targets = {}
            if args.backend in ("sqlite", "both"):
                targets["sqlite"] = lambda: resolve_url(str(Path(tmp) / "bench.db"))
            if args.backend in ("postgresql", "both"):
                targets["postgresql"] = lambda: _pg_database(tmp)
        for name, make in targets.items():
            print(f"{name}:", flush=True)
            results[name] = bench(make(), args)
        _stop_pg()
    print(f"\n{'backend':<12}{'page':<18}{'data median s':>15}{'data max s':>12}{'render s':>10}")
    for name, res in results.items():
        for r in res["pages"]:
            print(
                f"{name:<12}{r['page']:<18}{r['data_s_median']:>15.3f}{r['data_s_max']:>12.3f}"
                f"{r.get('render_s', float('nan')):>10.3f}"
            )
    out = {
        "runs": args.runs,
        "points_per_run": args.points,
        "backends": results,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(
        json.dumps(
            {
                "bench": "dashboard",
                "backends": {n: {r["page"]: r for r in res["pages"]} for n, res in results.items()},
            }
        )
    )
    return 0


_PG: list = []  # the throw-away server, when one was started


def _pg_database(tmp: str) -> str:
    """A new database on a throw-away PostgreSQL server (tests/pg.py) started for this run."""
    from tests.pg import start_server

    if not _PG:
        _PG.append(start_server())
    _PG[0].create_database("bench")
    return _PG[0].url("bench")


def _stop_pg() -> None:
    if _PG:
        _PG.pop().stop()


if __name__ == "__main__":
    sys.exit(main())
