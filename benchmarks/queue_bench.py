"""What the queue costs: the same tiny training job standalone and through the queue, in one run.

Measures, on a fresh SQLite database and a local Ray:
1. training throughput (tokens/s as the train job measures it, excluding eval/checkpoint time) of one
   tiny train job called directly (in-process, no Ray, no database) vs. submitted and run by the
   scheduler (Ray task, event batching, heartbeats, database writer) -> ratio (target: cost < 2 %);
2. metric-point ingest rate of the writer into SQLite (points/s, batches of 500 points);
3. queued -> running latency of a job submitted while the driver is idle (median of N);
4. throughput of 500 trivial jobs (jobs/s, submission included).

    .venv/bin/python benchmarks/queue_bench.py [--trivial 500] [--tokens 8192] [--repeats 2]

Prints a table and writes benchmarks/results/queue_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # same threads standalone and in the Ray worker

TRAIN = {"recipe": "lean", "size": "tiny", "seq_len": 64, "batch_size": 8, "eval_every": 10_000,
         "eval_tokens": 512, "ckpt_every": 10_000, "data": {"tokenizer": "byte"}}  # fmt: skip


class TrivialKinds:
    """A job registry with one kind that does nothing (pickled by value into the Ray workers)."""

    def validate(self, kind: str, spec: dict) -> dict:
        return dict(spec)

    def run(self, kind: str, spec: dict, reporter, artifact_dir) -> dict:
        return {}


def bench_train(tmp: Path, tokens: int, repeats: int) -> dict:
    from orchestrator import Grid, Queue
    from workers import jobs
    from workers.reporter import MemoryReporter

    spec = {**TRAIN, "tokens": tokens}
    standalone, queued = [], []
    q = Queue(db=tmp / "train.db", artifacts=tmp / "art")
    for i in range(repeats):  # interleaved, so drifting machine load hits both sides alike
        out = jobs.run(
            "train", jobs.validate("train", {**spec, "seed": i}), MemoryReporter(), tmp / f"alone{i}"
        )
        standalone.append(out["tokens_per_s"])
        (jid,) = q.submit(Grid(f"bench{i}", base={**spec, "seed": i}))
        q.run(until_empty=True, progress=False, poll_s=0.2)
        queued.append(float(q.results("train_results").set_index("job_id").loc[jid, "tokens_per_s"]))
    a, b = statistics.median(standalone), statistics.median(queued)
    return {"standalone_tokens_per_s": a, "queue_tokens_per_s": b, "queue_over_standalone": b / a,
            "runs": repeats, "tokens": tokens}  # fmt: skip


def bench_ingest(tmp: Path, points: int = 50_000, batch: int = 500) -> dict:
    from orchestrator import Grid, Queue
    from orchestrator.writer import write_events
    from workers.reporter import Event

    q = Queue(db=tmp / "ingest.db", kinds=TrivialKinds())
    (jid,) = q.submit(Grid("ingest", job="noop"))
    keys = ("train_loss", "lr", "tokens_per_s", "peak_mem_mb", "val_loss")
    events = [Event("metric", 0.0, {"key": keys[i % 5], "step": i // 5, "value": 1.0 / (i + 1),
                                    "tokens": i * 64, "wall_s": i * 0.01}) for i in range(points)]  # fmt: skip
    t = time.perf_counter()
    for i in range(0, points, batch):
        write_events(q.eng, [(jid, 1, events[i : i + batch])])
    dt = time.perf_counter() - t
    return {"points": points, "batch": batch, "points_per_s": points / dt}


def bench_latency_and_throughput(tmp: Path, n_trivial: int, n_latency: int = 10) -> dict:
    import sqlalchemy as sa

    from orchestrator import Grid, Queue
    from orchestrator.scheduler import Scheduler

    kinds = TrivialKinds()
    q = Queue(db=tmp / "trivial.db", kinds=kinds)
    sched = Scheduler(q.eng, tmp / "art", kinds, progress=False, poll_s=0.2)
    th = threading.Thread(target=sched.run, daemon=True)
    th.start()
    time.sleep(3.0)  # the driver is up and idle
    lat = []
    for i in range(n_latency):
        (jid,) = q.submit(Grid(f"lat{i}", job="noop", base={"i": i}))
        q.wait([jid], timeout=60, poll_s=0.05)
        with q.eng.connect() as conn:
            created, started = conn.execute(
                sa.text("SELECT j.created_at, a.started_at FROM jobs j JOIN attempts a ON a.job_id=j.id "
                        "WHERE j.id=:j"), {"j": jid}).one()  # fmt: skip
        lat.append(started - created)
    t = time.perf_counter()
    ids = q.submit(Grid("many", job="noop", sweep={"i": list(range(n_trivial))}))
    q.wait(ids, timeout=1800, poll_s=0.2)
    dt = time.perf_counter() - t
    sched._on_signal(2, None)
    th.join(60)
    return {"latency_median_s": statistics.median(lat), "latency_max_s": max(lat), "trivial_jobs": n_trivial,
            "trivial_jobs_per_s": n_trivial / dt, "trivial_total_s": dt}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trivial", type=int, default=500)
    ap.add_argument("--tokens", type=int, default=8 * 64 * 24)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "queue_bench.json"))
    args = ap.parse_args()
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        res = {"train": bench_train(tmp, args.tokens, args.repeats), "ingest": bench_ingest(tmp),
               "scheduling": bench_latency_and_throughput(tmp, args.trivial)}  # fmt: skip
    ray.shutdown()
    res["machine"] = {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    t, i, s = res["train"], res["ingest"], res["scheduling"]
    rows = [
        ("train tokens/s standalone", f"{t['standalone_tokens_per_s']:.0f}"),
        ("train tokens/s via queue", f"{t['queue_tokens_per_s']:.0f}"),
        ("queue / standalone", f"{t['queue_over_standalone']:.3f}"),
        ("metric ingest (points/s)", f"{i['points_per_s']:.0f}"),
        ("queued->running latency (median s)", f"{s['latency_median_s']:.3f}"),
        (f"{s['trivial_jobs']} trivial jobs (jobs/s)", f"{s['trivial_jobs_per_s']:.1f}"),
    ]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v:>10}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
