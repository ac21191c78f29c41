"""The eval job: a trained checkpoint scored on multiple-choice tasks at several inference loop counts.

Tasks (`tasks`), each one of:
- a built-in generator, `deduction` (proof depth 0-5) or `kinship` (chain length 2-10): written to
  `<artifact dir>/tasks/<name>.jsonl` from `task_seed` with `n_per_subset` items per subset;
- a task file `*.jsonl` in the schema of workers/tasks/schema.py (name: the file's stem), checked
  whole when the spec is validated, so a bad file is refused before anything is submitted or run;
- `harness:NAME`, an lm-evaluation-harness task or group (SciQ, ARC, ...; its data from the hub or the
  local HF cache), or one defined by a YAML config in `harness_include`. Needs `pip install -e .[eval]`.

Local tasks are scored through `LoopedScorer.loglikelihood` with the harness's multiple-choice rules
(workers/tasks/scoring.py); harness tasks through the harness itself with the same scorer wrapped as
its model (workers/evaluate/lm_eval_adapter.py). Every loop count uses one fixed h0 seed (training's evaluation
seed by default), so the scores are a function of the checkpoint and the spec.

Resumable: each (task, loop count) result is written to `<artifact dir>/scores/` as soon as it is
done, keyed by what it depends on (checkpoint file, device type, items, loops, h0 seed); a rerun reports the stored
ones again and scores only the rest. A stop request (Ctrl-C, cancel) ends the job between two of them.
Each result is a `task_scores` row per subset plus one for the whole task (subset "all").

Standalone: `python -m looplab.workers.evaluate.eval --checkpoint runs/x --tasks deduction,kinship --loops 1,2,4,8`
(results under `<checkpoint dir>/eval` unless `--out DIR`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.workers.cost import ForwardCost
from looplab.workers.identity import EXECUTION, spec_to_dict
from looplab.workers.inputs import EVAL_H0_SEED
from looplab.workers.spec_cli import SpecParser, checkpoint_exists, job_parser, run_standalone
from looplab.workers.tasks import GENERATORS
from looplab.workers.tasks.entries import (
    CATEGORIES,
    HARNESS_PREFIX,
    category,
    local_items,
    task_list,
    task_name,
)
from looplab.workers.tasks.schema import Item, dumps_jsonl, load_jsonl

if TYPE_CHECKING:
    from looplab.workers.cost import TrainCost

DEFAULT_LOOPS = (1, 2, 4, 8)
TABLE = "task_scores"
HEARTBEAT_S = 10.0


@dataclass(frozen=True)
class Spec:
    checkpoint: str | None = None
    """train artifact dir or checkpoint file (the queue fills it in when the eval starts)"""
    tasks: list[str] = field(default_factory=lambda: list(GENERATORS))
    """deduction, kinship (generated), task files (.jsonl) or lm-evaluation-harness tasks as harness:NAME"""
    loops: list[int] = field(default_factory=lambda: list(DEFAULT_LOOPS))
    """inference loop counts to score at"""
    n_per_subset: int = 60
    """items per subset of a generated task (per proof depth, per chain length)"""
    task_seed: int = 0
    """seed of the generated tasks (the same seed writes the same files)"""
    batch_size: int = 16
    """sequences per forward pass (every choice of an item is one sequence)"""
    h0_seed: int = EVAL_H0_SEED
    """seed of the initial state h0, the same for every batch; the default is training's evaluation seed"""
    limit: int | None = None
    """score only the first N items of each task (none = all)"""
    harness_include: str | None = None
    """a folder of lm-evaluation-harness task configs (YAML) where harness:NAME tasks are also looked up"""
    categories: dict[str, str] = field(default_factory=dict)
    """task name -> knowledge or reasoning, for the Tasks page (generated tasks are reasoning, well-known
    harness tasks knowledge)"""
    device: str = field(default="auto", metadata=EXECUTION)
    """auto, cpu, cuda or cuda:N"""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        d = fields.with_defaults("eval", d, cls)
        checkpoint = fields.optional_text("checkpoint", d["checkpoint"], "a path string")
        include = d["harness_include"]
        if include is not None and (not isinstance(include, str) or not Path(include).expanduser().is_dir()):
            raise ConfigError(f"harness_include: expected an existing folder, got {include!r}")
        categories = fields.mapping(
            "categories", d["categories"], "a dict task name -> knowledge | reasoning"
        )
        for name, cat in categories.items():
            fields.choice(f"categories.{name}", cat, CATEGORIES)
        return cls(
            checkpoint=checkpoint,
            tasks=task_list(d["tasks"]),
            loops=fields.int_list("loops", d["loops"], lo=1),
            n_per_subset=fields.integer("n_per_subset", d["n_per_subset"], lo=1, hi=100_000),
            task_seed=fields.integer("task_seed", d["task_seed"], lo=0),
            batch_size=fields.integer("batch_size", d["batch_size"], lo=1),
            h0_seed=fields.integer("h0_seed", d["h0_seed"], lo=0),
            limit=fields.integer("limit", d["limit"], lo=1, allow_none=True),
            harness_include=None if include is None else str(Path(include).expanduser().resolve()),
            categories=dict(sorted(categories.items())),
            device=fields.device("device", d["device"]),
        )

    to_dict = spec_to_dict


# ---------------------------------------------------------------------------------- cost model

# Bytes of task text per token under a BPE tokenizer (English prose under a 32k BPE): the cost model's
# assumption where it cannot tokenize (the byte tokenizer has exactly 1).
BPE_BYTES_PER_TOKEN = 4.0


@functools.lru_cache(maxsize=32)
def _generated(entry: str, n_per_subset: int, seed: int) -> tuple[Item, ...]:
    return tuple(GENERATORS[entry].generate(n_per_subset, seed))


def cost(spec: Spec, trained: TrainCost) -> ForwardCost | None:
    """The forwards of scoring every (task, loop count) on the model of the train job it follows
    (`trained`, that job's cost: its model and tokenizer; workers.jobs.Pricing.ON_CHECKPOINT); None when
    a task's items are not known before it runs (a `harness:` task: its data comes from the harness).

    How it is counted, and where it is approximate: the items are the job's own (generated from
    `task_seed`, or read from the task file; cut to `limit`); every choice of an item is one sequence
    (the separator, the context, " " and the choice), of len(UTF-8 bytes) / bytes per token tokens (exact
    for the byte tokenizer, an average for any other: see BPE_BYTES_PER_TOKEN) less the last one, cut to the
    model's seq_len; a task's sequences are sorted by length and batched `batch_size` at a time, each
    batch padded to its longest, as `LoopedScorer` does, and a batch of R rows of width W costs R W forward FLOPs per
    token at that width (`model.flops.step_flops`) for each loop count. Memory: one batch at the
    longest width (`model.memory.forward_memory`)."""
    from looplab.model.memory import DEVICE_TYPES, forward_memory
    from looplab.workers.data.shards import DOC_SEP
    from looplab.workers.tasks.scoring import requests

    if any(entry.startswith(HARNESS_PREFIX) for entry in spec.tasks):
        return None
    cfg = trained.cfg
    bytes_per_token = 1.0 if trained.tokenizer == "byte" else BPE_BYTES_PER_TOKEN
    per_token = functools.cache(trained.forward_flops)  # a family's: its own, at its run's length
    flops, widest = 0.0, 0
    for entry in spec.tasks:  # each task is scored alone: its sequences batched together
        items = (
            _generated(entry, spec.n_per_subset, spec.task_seed)
            if entry in GENERATORS
            else load_jsonl(Path(entry))
        )
        widths = []
        for context, continuation in requests(list(items[: spec.limit] if spec.limit else items)):
            n_bytes = len((DOC_SEP + context + continuation).encode())
            widths.append(min(cfg.seq_len, max(1, math.ceil(n_bytes / bytes_per_token) - 1)))
        widths.sort(reverse=True)
        widest = max([widest, *widths[:1]])
        for i in range(0, len(widths), spec.batch_size):  # (rows, width of the longest) per batch
            rows, width = len(widths[i : i + spec.batch_size]), widths[i]
            flops += sum(rows * width * per_token(loops, width) for loops in spec.loops)
    memory = forward_memory(cfg, spec.batch_size, widest or cfg.seq_len)
    return ForwardCost(float(flops), {d: memory for d in DEVICE_TYPES}, cfg.d_model)


# ---------------------------------------------------------------------------------- resumable results


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _checkpoint_identity(checkpoint: str) -> dict[str, Any]:
    """What a stored result depends on of the checkpoint: the file, its size and modification time."""
    from looplab.workers.checkpoint import find

    path = find(checkpoint)
    stat = path.stat()
    return {"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


class ResultStore:
    """Per (task, loops) results as JSON files under `root`, each with the key it was computed for."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, task: str, loops: int) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in task)
        return self.root / f"{safe}@{loops}.json"

    def get(self, task: str, loops: int, key: str) -> list[dict[str, Any]] | None:
        path = self._path(task, loops)
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return stored["rows"] if stored.get("key") == key else None

    def put(self, task: str, loops: int, key: str, rows: list[dict[str, Any]]) -> None:
        path = self._path(task, loops)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps({"key": key, "task": task, "loops": loops, "rows": rows}, indent=1))
        os.replace(tmp, path)  # a kill leaves the previous file or the new one, never half of one


# ---------------------------------------------------------------------------------- the job


def run(spec: Spec, reporter, artifact_dir: str | Path | None) -> dict[str, Any]:
    from looplab.workers.device import resolve_device
    from looplab.workers.reporter import JobInterrupted
    from looplab.workers.tasks.likelihood import LoopedScorer, load_checkpoint
    from looplab.workers.tasks.scoring import score_items, subset_rows

    if spec.checkpoint is None:
        raise ConfigError("checkpoint: missing; give a train artifact dir or a checkpoint file")
    out_dir = Path(artifact_dir) if artifact_dir is not None else default_out(spec.checkpoint)
    store = ResultStore(out_dir / "scores")
    device = resolve_device(spec.device)
    model, tokenizer = load_checkpoint(spec.checkpoint, device)
    ckpt_id = _checkpoint_identity(spec.checkpoint)
    local = [e for e in spec.tasks if not e.startswith(HARNESS_PREFIX)]
    harness = [task_name(e) for e in spec.tasks if e.startswith(HARNESS_PREFIX)]
    files = {
        task_name(e): local_items(e, out_dir / "tasks", spec.n_per_subset, spec.task_seed, spec.limit)
        for e in local
    }
    units = [(task_name(e), n) for e in spec.tasks for n in spec.loops]
    all_rows: list[dict[str, Any]] = []
    done = 0
    reporter.progress(0, len(units))
    harness_manager = None
    last_beat = time.monotonic()

    def heartbeat(_: int) -> None:  # after every forward pass, at most every HEARTBEAT_S
        nonlocal last_beat
        if time.monotonic() - last_beat > HEARTBEAT_S:
            reporter.heartbeat()
            last_beat = time.monotonic()

    for name, loops in units:
        if reporter.should_stop():
            raise JobInterrupted(f"eval stopped after {done} of {len(units)} (task, loops) results")
        if name in files:
            key = _fingerprint(
                ckpt_id, device.type, spec.h0_seed, loops, dumps_jsonl(files[name][1]).decode()
            )
        else:
            key = _fingerprint(
                ckpt_id, device.type, spec.h0_seed, loops, name, spec.limit, spec.harness_include
            )
        rows = store.get(name, loops, key)
        resumed = rows is not None
        if rows is None:
            scorer = LoopedScorer(
                model, tokenizer, loops=loops, h0_seed=spec.h0_seed, batch_size=spec.batch_size, device=device
            )
            scorer.on_batch = heartbeat
            if name in files:
                rows = [
                    {"task": name, **r}
                    for r in subset_rows(score_items(files[name][1], scorer.loglikelihood))
                ]
            else:
                from looplab.workers.evaluate.lm_eval_adapter import LooplabLM, harness_rows, task_manager

                harness_manager = harness_manager or task_manager(spec.harness_include, harness)
                by_task = harness_rows(LooplabLM.from_scorer(scorer), [name], harness_manager, spec.limit)
                rows = [{"task": task, **r} for task, task_rows in by_task.items() for r in task_rows]
            rows = [{**r, "loops": loops, "category": category(r["task"], spec.categories)} for r in rows]
            store.put(name, loops, key, rows)
        for row in rows:
            reporter.result(TABLE, row)
        all_rows += rows
        done += 1
        reporter.progress(done, len(units))
        whole = next((r for r in rows if r["subset"] == "all"), None)
        if whole is not None:
            reporter.log(
                f"{name} @ {loops} loops: acc {whole['acc']:.3f} (n={whole['n']}, chance {whole['chance'] or 0:.3f})"
                + ("  [stored result]" if resumed else "")
            )
    return {"task_scores": all_rows, "task_files": {name: str(path) for name, (path, _) in files.items()}}


def default_out(checkpoint: str) -> Path:
    """Where a standalone eval keeps its task files and results: `eval/` beside the checkpoint."""
    path = Path(checkpoint)
    return (path if path.is_dir() else path.parent) / "eval"


# ---------------------------------------------------------------------------------- CLI


def build_parser() -> SpecParser:
    what = "Multiple-choice task accuracy of a trained looped LM at several loop counts."
    out = "folder for task files and results (default: <checkpoint dir>/eval)"
    return job_parser(Spec, "looplab.workers.evaluate.eval", what, out_help=out, required=("checkpoint",))


def print_table(spec: Spec, out: dict[str, Any], args: Any = None) -> None:
    """The scores as a table, one row per (task, subset, loop count)."""
    print(f"eval of {spec.checkpoint}")
    print(
        f"{'task':<16} {'subset':<12} {'loops':>5} {'n':>5} {'acc':>6} {'acc_norm':>8} {'stderr':>7} {'chance':>6}"
    )
    for r in out["task_scores"]:
        norm = "-" if r["acc_norm"] is None else f"{r['acc_norm']:.3f}"
        err = "-" if r["stderr"] is None else f"{r['stderr']:.3f}"
        chance = "-" if r["chance"] is None else f"{r['chance']:.3f}"
        print(
            f"{r['task']:<16} {r['subset']:<12} {r['loops']:>5} {r['n']:>5} {r['acc']:>6.3f} {norm:>8} "
            f"{err:>7} {chance:>6}"
        )


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        build_parser(), Spec, run, print_table, desc="eval", argv=argv, before=checkpoint_exists
    )


if __name__ == "__main__":
    raise SystemExit(main())
