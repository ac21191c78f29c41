"""The train job: one model configuration trained to a token (or wall-clock) budget, exactly resumable.

    Spec.from_dict(d) -> Spec           validated, canonical (`to_dict()`), ConfigError naming the field
    run(spec, reporter, artifact_dir)   trains, reports curves and one `train_results` row, returns it

Exact resume: the batch at step s and the loop counts at step s are pure functions of (seed, s), and
the checkpoint holds model, optimizers, every RNG state and the trainer's state (step, schedule
position, clocks); so a run killed at any point and restarted from its last checkpoint reproduces the
uninterrupted loss curve bit for bit on CPU. Starting `run` on an artifact dir that holds checkpoints
resumes from the newest one a resume may take (workers/artifacts.py `resume_from`).

Time budget (`time_s`): a short calibration on a throw-away copy of the model measures tokens/s
(reported as `calib_tokens_per_s`, saved in `calibration.json`) and plans the step count; before every
step the plan is re-fitted to the time left (workers/train/schedule.py), and the cooldown still ends at lr 0
on the last step. The summary reports how far the real training time landed from `time_s`. Unlike a
token budget, such a run is not bit-reproducible: its step count depends on the machine's speed.

The job is four modules importing one way: workers/train/spec.py (the Spec, torch-free),
workers/train/trainer.py (the loop), workers/train/cost.py (its cost model: FLOPs, steps, memory) and
workers/train/cli.py (the command line). This one only names them for `workers.jobs` and
`python -m looplab.workers.train --preset lean --size tiny --tokens 2e6 --out runs/x`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looplab.workers.reporter import Reporter
from looplab.workers.train.cost import TrainCost, cost
from looplab.workers.train.spec import Spec, check_artifact_dir

__all__ = ["Spec", "TrainCost", "check_artifact_dir", "cost", "run"]


def run(spec: Spec, reporter: Reporter, artifact_dir: str | Path) -> dict[str, Any]:
    """Train (or resume) `spec` in `artifact_dir`; returns the `train_results` row (+ compile_seconds)."""
    from looplab.workers.train.trainer import (
        train,  # torch is imported when a job runs, not when specs are checked
    )

    return train(spec, reporter, Path(artifact_dir))


if __name__ == "__main__":
    from looplab.workers.train.cli import main

    raise SystemExit(main())
