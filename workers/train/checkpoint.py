"""A train job's checkpoints as the trainer writes and reads them (workers/train/trainer.py `Trainer`): what one
holds (model, optimizers, every rank's RNG state, `TrainerState`, and the spec and model config that
identify the run), the checks a resume makes before it continues (same run identity, same total steps,
the same split for a split-dependent family, the same checkpoint on every rank of a gang), and the
restore itself. Files and their names are workers/artifacts.py's; the atomic write is
workers/checkpoint.py's. Each function takes the trainer whose run it saves or restores.
"""

from __future__ import annotations

import time
from typing import Any

from looplab.model.errors import ConfigError
from looplab.workers import artifacts
from looplab.workers import checkpoint as ckpt
from looplab.workers.train.spec import identity_diff
from looplab.workers.train.state import TrainerState

# Each function takes the `workers.train.trainer.Trainer` (not imported: it imports this module).
Trainer = Any


def save(trainer: Trainer, final: bool = False) -> None:
    """Every process's RNG state to rank 0, which writes the checkpoint (and its final weights at the end: `checkpoint.save_final`)."""
    t0 = time.perf_counter()
    rngs = trainer.gang.gather(ckpt.rng_state())
    if not trainer.writes:
        return
    if trainer.schedule is not None:
        trainer.state.schedule = trainer.schedule.state_dict()
    identity = {"spec": trainer.spec.to_dict(), "model_config": trainer.cfg.to_dict(), "final": final}
    if trainer.split_dependent:
        identity["split"] = trainer._split()
    weights = {"model": trainer.model.state_dict()}
    trainer.ckpt_path = trainer.dir / artifacts.checkpoint_name(trainer.attempt, trainer.state.step)
    ckpt.save(
        trainer.ckpt_path,
        {
            **weights,
            "optimizers": [opt.state_dict() for opt in trainer.opts],
            "rng": rngs[0],
            **({"rng_ranks": rngs} if len(rngs) > 1 else {}),
            "trainer": trainer.state.to_dict(),
            "attempt": trainer.attempt,  # its fencing token, as in its name (workers/artifacts.py)
            **identity,
        },
    )
    if final:
        queued = getattr(trainer.reporter, "attempt", None) is not None  # a driver records its result
        ckpt.save_final(
            trainer.dir, {**weights, "trainer": trainer.state.to_dict(), **identity}, trainer.attempt, queued
        )
    for old in artifacts.removable(trainer.dir, trainer.spec.keep_checkpoints):
        old.unlink(missing_ok=True)  # after the new one is in place: a kill between loses nothing
    trainer.state.ckpt_seconds += time.perf_counter() - t0
    trainer.reporter.checkpoint(str(trainer.ckpt_path), trainer.state.step)


def restore(trainer: Trainer, saved: dict[str, Any]) -> None:
    """Continue from a checkpoint of the same run: its spec may differ from this one in execution
    fields only (workers/train/spec.py `identity`)."""
    diff = identity_diff(saved["spec"], trainer.spec.to_dict())
    if diff:
        k = diff[0]
        raise ConfigError(
            f"checkpoint: {trainer.ckpt_path} belongs to a different run: {k}={saved['spec'].get(k)!r}, "
            f"this spec has {trainer.spec.to_dict().get(k)!r} (differing fields: {', '.join(diff)})"
        )
    if "trainer" not in saved:
        raise ConfigError(
            f"checkpoint: {trainer.ckpt_path} was written by an older version of the trainer; "
            "use a new artifact dir"
        )
    if trainer.split_dependent and saved.get("split", trainer._split()) != trainer._split():
        raise ConfigError(
            f"checkpoint: {trainer.ckpt_path} was trained with split {saved['split']}, this run has "
            f"{trainer._split()}: family {trainer.built.family.name!r} draws randomness from the global "
            "generator (its forward takes no row_key), so a step's draws depend on how its rows are "
            "split; resume with the same micro_batch_size, bucketing and workers"
        )
    restored = TrainerState.from_dict(saved["trainer"])
    if trainer.schedule is not None:  # a time budget continues where its schedule was
        trainer.schedule.load_state_dict(restored.schedule)
    elif restored.total_steps != trainer.state.total_steps:
        raise ConfigError(
            f"checkpoint: {trainer.ckpt_path} was made for {restored.total_steps} steps, "
            f"this run has {trainer.state.total_steps}"
        )
    trainer.model.load_state_dict(saved["model"])
    for opt, opt_state in zip(trainer.opts, saved["optimizers"], strict=True):
        opt.load_state_dict(opt_state)
    ranks = saved.get("rng_ranks", ())  # a gang's checkpoint: each rank's own, at the same world size
    ckpt.set_rng_state(ranks[trainer.gang.rank] if len(ranks) == trainer.gang.size else saved["rng"])
    trainer.state = restored


def same_everywhere(trainer: Trainer) -> None:
    """In a gang every rank must resume from the same checkpoint (the artifact dir on storage that
    every node sees), or the ranks would train different steps."""
    mine = -1 if trainer.saved is None else int(trainer.saved.get("trainer", {}).get("step", -2))
    theirs = trainer.gang.agree(float(mine))
    if theirs != mine:
        raise ConfigError(
            f"checkpoint: rank {trainer.gang.rank} sees {'none' if mine == -1 else f'step {mine}'} in "
            f"{trainer.dir}, rank 0 sees {'none' if theirs == -1 else f'step {theirs:.0f}'}: the artifact "
            "dir must be on storage that every node of a multi-worker run sees"
        )
