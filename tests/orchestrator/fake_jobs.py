"""Trivial job kinds with the workers.jobs interface (validate/run), for testing the queue in seconds.

- train:        counter (`fail`: raises at step 3) with a deterministic "loss" curve (seeded RNG whose state is checkpointed),
                a checkpoint every `ckpt_every` steps, resume, token or time budget, train_results row
- depth_sweep:  needs its train job's artifact dir (checkpoint) and reports depth_evals rows
- decode_bench: architecture only; one decode_benches row
- sleep:        sleeps, logs CUDA_VISIBLE_DEVICES (placement)
- boom:         raises (tracebacks, retries); `fail_times` > 0 fails only the first N runs
- noop:         returns at once (throughput)

`KINDS` declares them: the doubles of the real kinds with the real declarations (what they follow, are
about, run alone, write), run by this module; the others plain kinds.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from pathlib import Path
from typing import Any

from looplab.model.errors import ConfigError
from looplab.workers import jobs
from looplab.workers.jobs import JobInterrupted, Kind

SPECS: dict[str, dict[str, Any]] = {
    "train": {
        "recipe": "lean",
        "size": "tiny",
        "model": {},
        "seed": 0,
        "tokens": None,
        "time_s": None,
        "steps": 6,
        "ckpt_every": 2,
        "step_s": 0.02,
        "fail": False,
    },
    "depth_sweep": {"checkpoint": None, "loops": [1, 2, 4]},
    "decode_bench": {"recipe": "lean", "size": "tiny", "model": {}},
    "sleep": {"seconds": 1.0, "tag": ""},
    "boom": {"message": "boom", "fail_times": 0, "tag": ""},
    "noop": {"tag": 0},
}
RECIPES = ("fixed4", "lean", "parcae", "plain")
KINDS = {
    kind: dataclasses.replace(jobs.KINDS[kind], module=__name__) if kind in jobs.KINDS else Kind(__name__)
    for kind in SPECS
}


def validate(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    if kind not in SPECS:
        raise ConfigError(f"job: unknown kind {kind!r}; accepted: {', '.join(SPECS)}")
    unknown = sorted(set(spec) - set(SPECS[kind]))
    if unknown:
        raise ConfigError(f"{kind}: unknown key(s) {unknown}; accepted: {', '.join(SPECS[kind])}")
    out = {**SPECS[kind], **spec}
    if "recipe" in out and out["recipe"] not in RECIPES:
        raise ConfigError(f"recipe: unknown {out['recipe']!r}; accepted: {', '.join(RECIPES)}")
    if kind == "train" and (out["tokens"] is None) == (out["time_s"] is None):
        raise ConfigError("tokens / time_s: give exactly one budget")
    return out


def run(kind: str, spec: dict[str, Any], reporter: Any, artifact_dir: str | Path) -> dict[str, Any]:
    return globals()[f"_{kind}"](validate(kind, spec), reporter, Path(artifact_dir))


def _train(spec: dict[str, Any], rep: Any, art: Path) -> dict[str, Any]:
    ckpt = art / "checkpoint.json"
    rng = random.Random(spec["seed"])
    step, train_s = 0, 0.0
    if ckpt.exists():
        state = json.loads(ckpt.read_text())
        step, train_s = state["step"], state["train_s"]
        rng.setstate((state["rng"][0], tuple(state["rng"][1]), state["rng"][2]))
        rep.resumed(step)
    t0 = time.perf_counter() - train_s
    while True:
        elapsed = time.perf_counter() - t0
        if spec["time_s"] is not None and elapsed >= spec["time_s"]:
            break
        if spec["time_s"] is None and step >= spec["steps"]:
            break
        time.sleep(spec["step_s"])
        step += 1
        if spec["fail"] and step == 3:
            raise ValueError("loss is NaN at step 3")
        rep.metric(
            "train_loss",
            step,
            5.0 / step + rng.random() * 1e-3,
            tokens=step * 64,
            wall_s=time.perf_counter() - t0,
        )
        rep.progress(step, spec["steps"], eta_s=(spec["steps"] - step) * spec["step_s"])
        if step % spec["ckpt_every"] == 0:
            tmp = ckpt.with_suffix(".tmp")
            tmp.write_text(
                json.dumps({"step": step, "train_s": time.perf_counter() - t0, "rng": rng.getstate()})
            )
            os.replace(tmp, ckpt)
            rep.checkpoint(str(ckpt), step)
            if rep.should_stop():
                raise JobInterrupted(f"stopped at step {step}")
    train_s = time.perf_counter() - t0
    (art / "final.json").write_text(json.dumps({"step": step}))
    row = {"steps": step, "tokens": step * 64, "train_seconds": train_s, "time_budget_s": spec["time_s"]}
    rep.result("train_results", row)
    return row


def _depth_sweep(spec: dict[str, Any], rep: Any, art: Path) -> dict[str, Any]:
    if not spec["checkpoint"] or not (Path(spec["checkpoint"]) / "final.json").exists():
        raise RuntimeError(f"depth sweep started before its train job finished: {spec['checkpoint']}")
    for n in spec["loops"]:
        rep.result("depth_evals", {"loops": n, "val_loss": 3.0 / n})
    return {"loops": spec["loops"]}


def _decode_bench(spec: dict[str, Any], rep: Any, art: Path) -> dict[str, Any]:
    rep.result(
        "decode_benches",
        {
            "arch": spec["recipe"],
            "size": spec["size"],
            "context_len": 128,
            "batch_size": 1,
            "ms_per_token": 1.0,
            "kv_cache_mb": 0.5,
            "device": "cpu",
            "dtype": "float32",
            "cuda_graph": False,
        },
    )
    return {}


def _sleep(spec: dict[str, Any], rep: Any, art: Path) -> dict[str, Any]:
    rep.log(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}")
    time.sleep(spec["seconds"])
    return {}


def _boom(spec: dict[str, Any], rep: Any, art: Path) -> dict[str, Any]:
    runs = art / "runs"
    n = int(runs.read_text()) + 1 if runs.exists() else 1
    runs.write_text(str(n))
    if spec["fail_times"] == 0 or n <= spec["fail_times"]:
        raise RuntimeError(f"{spec['message']} (run {n})")
    return {"runs": n}


def _noop(spec: dict[str, Any], rep: Any, art: Path) -> dict[str, Any]:
    return {}
