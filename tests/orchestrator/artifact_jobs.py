"""Job kinds that leave a train job's artifact files, for the retention tests (a `JobRegistry` like
workers.jobs, run by the real queue on Ray in a second):

- train:        writes checkpoint.pt (`ckpt_bytes` bytes), then final.pt (`final_bytes`; 0: none), then
                fails when `fail`; one train_results row when it succeeds
- depth_sweep:  about its train job's checkpoint; fails unless the train dir holds final.pt, and logs
                which of checkpoint.pt / final.pt it found there when it ran
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from looplab.model.errors import ConfigError
from looplab.workers import jobs
from looplab.workers.artifacts import CHECKPOINT, FINAL

SPECS: dict[str, dict[str, Any]] = {
    "train": {
        "recipe": "lean",
        "size": "tiny",
        "model": {},
        "seed": 0,
        "tokens": 64,
        "ckpt_bytes": 3000,
        "final_bytes": 1000,
        "fail": False,
    },
    "depth_sweep": {"checkpoint": None},
}
KINDS = {kind: dataclasses.replace(jobs.KINDS[kind], module=__name__, views=()) for kind in SPECS}


def validate(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    if kind not in SPECS:
        raise ConfigError(f"job: unknown kind {kind!r}; accepted: {', '.join(SPECS)}")
    unknown = sorted(set(spec) - set(SPECS[kind]))
    if unknown:
        raise ConfigError(f"{kind}: unknown key(s) {unknown}; accepted: {', '.join(SPECS[kind])}")
    return {**SPECS[kind], **spec}


def run(kind: str, spec: dict[str, Any], reporter: Any, artifact_dir: str | Path) -> dict[str, Any]:
    spec, art = validate(kind, spec), Path(artifact_dir)
    art.mkdir(parents=True, exist_ok=True)
    if kind == "train":
        (art / CHECKPOINT).write_bytes(b"c" * spec["ckpt_bytes"])
        if spec["final_bytes"]:
            (art / FINAL).write_bytes(b"f" * spec["final_bytes"])
        if spec["fail"]:
            raise RuntimeError("failed after its checkpoints")
        row = {"steps": 1, "tokens": spec["tokens"], "train_seconds": 0.1}
        reporter.result("train_results", row)
        return row
    trained = Path(spec["checkpoint"])
    reporter.log(f"found {CHECKPOINT}={(trained / CHECKPOINT).exists()} {FINAL}={(trained / FINAL).exists()}")
    if not (trained / FINAL).is_file():
        raise RuntimeError(f"no {FINAL} in {trained}")
    return {}
