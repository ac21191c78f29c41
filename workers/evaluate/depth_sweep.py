"""The depth-sweep job: a trained checkpoint evaluated at many inference loop counts.

For each loop count: validation loss and bits per byte on the fixed validation set (the train job's
first `eval_tokens` of the val shard) with a fixed h0 seed → a `depth_evals` row; the loop geometry of
every round on the same tokens (`model.geometry`: relative change ||h_t - h_{t-1}|| / ||h_{t-1}||,
angle between h_t and h_{t-1}, variance of h_t across channels, each a mean over tokens; the change
ratio mean ||Δ_t|| / mean ||Δ_{t-1}||; the bf16 resolution of the state round t changes) →
`round_deltas` rows, and `bf16_round` on the `depth_evals` row: the first round whose relative change
falls below that resolution. At each depth of `interaction_loops`: the interaction matrix (how much
skipping round i changes round j's update, i < j) over the first `interaction_tokens` validation
tokens → `round_interactions` rows; a depth n costs n - 1 extra forwards of those tokens, so the depths
are capped at `model.geometry.MAX_INTERACTION_LOOPS`.

Far-copy split (`split_far_copy`, definition in workers/validation.py): a target token is a *far copy*
when its previous occurrence in the sequence lies more than `far_distance` tokens back (default 500) and
it does not occur within that distance. Each `depth_evals` row stores `far_copy_loss` / `near_loss` (the
mean losses of the two groups), `far_share` (far tokens / predicted tokens), `far_distance` and
`far_definition` (`model.names.FAR_DEFINITION`; rows of sweeps before it hold definition 1, a token that
occurred anywhere beyond the smallest attention window). A sequence shorter than the distance has no
far tokens: a share of 0 and no far loss.

Test split (`test_split: true`, off by default and then left out of the canonical spec, so stored
sweeps keep their hashes): each loop count is also evaluated on the test split (workers/evaluate/heldout.py: the
validation stream's next `VAL_TOKENS` tokens, built on first use without touching the preparation), on
its first `eval_tokens` tokens with the same batches and h0 seeds → `test_loss`, `test_bpb` on the
`depth_evals` row (NULL without it).

Standalone: `python -m looplab.workers.evaluate.depth_sweep --checkpoint runs/x --loops 1,2,4,8`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.geometry import MAX_INTERACTION_LOOPS
from looplab.model.names import DEFAULT_FAR_DISTANCE, FAR_DEFINITION
from looplab.workers.cost import ForwardCost
from looplab.workers.identity import EXECUTION, spec_to_dict
from looplab.workers.inputs import EVAL_H0_SEED, data_spec, eval_inputs
from looplab.workers.spec_cli import SpecParser, checkpoint_exists, job_parser, run_standalone

if TYPE_CHECKING:
    from looplab.workers.cost import TrainCost

DEFAULT_LOOPS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
DEFAULT_INTERACTION_LOOPS = (4, 8)


@dataclass(frozen=True)
class Spec:
    checkpoint: str | None = None
    """train artifact dir or checkpoint file (the queue fills it in when the sweep starts)"""
    loops: list[int] = field(default_factory=lambda: list(DEFAULT_LOOPS))
    """inference loop counts to evaluate"""
    eval_tokens: int = 32768
    """validation tokens (the first ones of the val shard); the train job's eval_tokens reproduces its
    validation loss"""
    batch_size: int = 8
    """sequences per evaluation batch (batch i draws h0 from h0_seed + i); the train job's batch_size
    reproduces its validation loss, and a grid's sweep takes it unless the grid sets one"""
    micro_batch_size: int | None = field(default=None, metadata=EXECUTION)
    """sequences per forward (a batch runs in several forwards of this many; the same losses); none: the
    whole batch"""
    h0_seed: int = EVAL_H0_SEED
    """seed of the initial state h0 (batch i uses h0_seed + i); the default is training's evaluation seed"""
    split_far_copy: bool = True
    """also report the loss on far-copy tokens and on the others"""
    far_distance: int = DEFAULT_FAR_DISTANCE
    """tokens back beyond which a target's previous occurrence makes it a far copy (none within it)"""
    test_split: bool = False
    """also evaluate each loop count on the test split (workers/evaluate/heldout.py: the validation stream's next
    VAL_TOKENS tokens; the same `eval_tokens`, batches and h0 seeds) → test_loss, test_bpb"""
    interaction_loops: list[int] = field(default_factory=lambda: list(DEFAULT_INTERACTION_LOOPS))
    """inference loop counts (2..32) at which to measure the round-interaction matrix; [] for none"""
    interaction_tokens: int = 4096
    """validation tokens (the first ones, whole sequences) the interaction matrices are measured on"""
    device: str = field(default="auto", metadata=EXECUTION)
    """auto, cpu, cuda or cuda:N"""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        d = fields.with_defaults("depth_sweep", d, cls)
        checkpoint = fields.optional_text("checkpoint", d["checkpoint"], "a path string")
        return cls(
            checkpoint=checkpoint,
            loops=fields.int_list("loops", d["loops"], lo=1),
            eval_tokens=fields.integer("eval_tokens", d["eval_tokens"], lo=1),
            batch_size=fields.integer("batch_size", d["batch_size"], lo=1),
            micro_batch_size=fields.integer("micro_batch_size", d["micro_batch_size"], lo=1, allow_none=True),
            h0_seed=fields.integer("h0_seed", d["h0_seed"], lo=0),
            split_far_copy=fields.boolean("split_far_copy", d["split_far_copy"]),
            far_distance=fields.integer("far_distance", d["far_distance"], lo=1),
            test_split=fields.boolean("test_split", d["test_split"]),
            interaction_loops=interaction_loops(d["interaction_loops"]),
            interaction_tokens=fields.integer("interaction_tokens", d["interaction_tokens"], lo=1),
            device=fields.device("device", d["device"]),
        )

    def to_dict(self) -> dict[str, Any]:
        """Canonical (what the config hash is computed from); a field added later is left out at its
        default, so a sweep submitted before it existed keeps its hash (`LATER_DEFAULTS`)."""
        d = spec_to_dict(self)
        for name, default in LATER_DEFAULTS.items():
            if d[name] == default:
                del d[name]
        return d


# Fields added after sweeps were stored, with the default a spec without them means.
LATER_DEFAULTS: dict[str, Any] = {"far_distance": DEFAULT_FAR_DISTANCE, "test_split": False}


def interaction_loops(v: Any) -> list[int]:
    """[] or a list of loop counts in 2..MAX_INTERACTION_LOOPS (sorted, without repeats)."""
    if isinstance(v, list | tuple) and not v:
        return []
    counts = fields.int_list("interaction_loops", v, lo=2)
    if counts[-1] > MAX_INTERACTION_LOOPS:
        raise ConfigError(
            f"interaction_loops: at most {MAX_INTERACTION_LOOPS} (a depth n costs n - 1 extra forwards), "
            f"got {counts[-1]}"
        )
    return counts


def cost(spec: Spec, trained: TrainCost) -> ForwardCost:
    """The sweep's forwards on the model of the train job it follows (`trained`, that job's cost;
    workers.jobs.Pricing.ON_CHECKPOINT): per loop count n, the loss
    forward and the loop-geometry forward (no head) of the `eval_tokens` validation tokens (whole
    sequences, at least one), and with `test_split` a loss forward of as many test tokens; per interaction depth m, m headless forwards (one plain, m - 1 each skipping
    a round) of the interaction tokens. Memory: `model.memory.forward_memory` at the sequences of one
    forward, `micro_batch_size` where set (a batch then runs in several forwards), else `batch_size`. A model
    of another family: its own forward FLOPs (`TrainCost.forward_flops`), its head not known apart."""
    from looplab.model.flops import head_flops
    from looplab.model.memory import DEVICE_TYPES, forward_memory

    cfg, forward = trained.cfg, trained.forward_flops
    seq, head = cfg.seq_len, (0.0 if trained.family is not None else head_flops(cfg))
    tokens = max(1, spec.eval_tokens // seq) * seq
    flops = tokens * sum(2 * forward(n) - head for n in spec.loops)
    if spec.test_split:  # the loss forward again, on as many test tokens
        flops += tokens * sum(forward(n) for n in spec.loops)
    inter_tokens = min(tokens, max(seq, spec.interaction_tokens // seq * seq))
    flops += inter_tokens * sum(n * (forward(n) - head) for n in spec.interaction_loops)
    memory = forward_memory(cfg, spec.micro_batch_size or spec.batch_size)
    return ForwardCost(float(flops), {d: memory for d in DEVICE_TYPES}, cfg.d_model)


def refuse_follow(spec: dict[str, Any], followed: dict[str, Any]) -> None:
    """At submission (workers.jobs `refuse_follow`): a sweep asking for the test split of a corpus that
    has none is refused before its run trains (workers/evaluate/heldout.py `refuse_short`), not after it."""
    if not spec.get("test_split"):
        return
    from looplab.workers.data.shards import DataSpec
    from looplab.workers.evaluate.heldout import refuse_short

    # the data the sweep will read: the followed job's (`data_spec`; an import without one: the default)
    refuse_short(DataSpec.from_dict((followed.get("spec") or {}).get("data")).corpus)


def refuse_alone(spec: dict[str, Any]) -> None:
    """At submission of a sweep on its own (workers.jobs `refuse_alone`: a grid of sweeps of a given
    checkpoint), the test split refused as a follow-up's is (`refuse_follow`), of the data its run read:
    the `spec.json` of a train artifact dir (or of the dir holding the checkpoint file), a model
    directory's default corpus (`load_model`). A path that holds neither is the run's to report."""
    import json

    from looplab.workers import hub

    if not spec.get("test_split") or spec.get("checkpoint") is None:
        return
    path = Path(spec["checkpoint"]).expanduser()
    where = path if path.is_dir() else path.parent
    if (where / "spec.json").is_file():
        refuse_follow(spec, {"spec": json.loads((where / "spec.json").read_text())})
    elif hub.is_model_dir(where):
        refuse_follow(spec, {"spec": {}})


def heldout_chunks(
    checkpoint: str | Path, train_spec: dict[str, Any], eval_tokens: int, seq_len: int, reporter
):
    """The first `eval_tokens` of the checkpoint's data's test split (built on first use) as validation
    chunks: the windows `val_chunks` cuts from the validation split, cut from the test split."""
    from looplab.workers.data.shards import prepare, val_chunks
    from looplab.workers.evaluate.heldout import heldout_tokens

    spec = data_spec(train_spec, Path(checkpoint))
    return val_chunks(heldout_tokens(spec, prepare(spec), reporter), eval_tokens, seq_len)


class _Progress:
    """The sweep's `on_batch`: a progress event per batch, with an eta that weighs each batch by its loop
    count `at` (set by the caller as the sweep goes deeper): a batch at 16 loops costs about 16 at 1
    loop, so the time the first, shallow batches took would promise far too early an end."""

    def __init__(self, reporter, total: int, work: float) -> None:
        self.reporter, self.total, self.work = reporter, total, work
        self.at, self.done, self.done_work, self.started = 1.0, 0, 0.0, time.monotonic()

    def __call__(self, _batch: int) -> None:
        self.done += 1
        self.done_work += self.at
        spent = time.monotonic() - self.started
        left = (
            0.0 if self.done >= self.total else spent / self.done_work * max(0.0, self.work - self.done_work)
        )
        self.reporter.progress(self.done, self.total, left)


def run(spec: Spec, reporter, artifact_dir: str | Path) -> dict[str, Any]:
    from looplab.model.contract import capabilities
    from looplab.workers.device import resolve_device
    from looplab.workers.validation import evaluate, loop_geometry

    device = resolve_device(spec.device)
    ev = eval_inputs(spec.checkpoint, spec.eval_tokens, device)
    model, cfg, chunks = ev.model, ev.cfg, ev.chunks
    distance = spec.far_distance if spec.split_far_copy else None
    states = capabilities(model).round_states
    if not states:
        reporter.log("depth_sweep: the model's family has no round_states: no state or interaction measures")
    n_batches = -(-len(chunks) // spec.batch_size)
    tests = (
        heldout_chunks(spec.checkpoint, ev.train_spec, spec.eval_tokens, cfg.seq_len, reporter)
        if spec.test_split
        else None
    )
    t_batches = 0 if tests is None else -(-len(tests) // spec.batch_size)
    # whole sequences of the interaction tokens (at least one), as batches of the sweep
    inter_chunks = min(len(chunks), max(1, spec.interaction_tokens // cfg.seq_len))
    inter_batches = -(-inter_chunks // spec.batch_size)
    total = (2 * n_batches + t_batches) * len(spec.loops) + inter_batches * len(spec.interaction_loops)
    work = sum((2 * n_batches + t_batches) * n for n in spec.loops)
    tick = _Progress(reporter, total, work + sum(inter_batches * n for n in spec.interaction_loops))
    batches = {"h0_seed": spec.h0_seed, "on_batch": tick, "micro_batch_size": spec.micro_batch_size}
    evals, deltas = [], []
    for n in spec.loops:
        tick.at = n
        r = evaluate(
            model, chunks, spec.batch_size, device, ev.token_bytes, loops=n, far_distance=distance, **batches
        )
        # the state measures need the rounds' states (a family without `round_states` has none)
        geo = loop_geometry(model, chunks, spec.batch_size, device, n, **batches) if states else None
        row = {"loops": n, "val_loss": r.loss, "val_bpb": r.bpb, **_far_columns(r, distance)}
        row["bf16_round"] = geo.bf16_round if geo is not None else None
        t = None
        if tests is not None:  # the test split, evaluated as the validation split is
            t = evaluate(model, tests, spec.batch_size, device, ev.token_bytes, loops=n, **batches)
        row["test_loss"], row["test_bpb"] = (None, None) if t is None else (t.loss, t.bpb)
        reporter.result("depth_evals", row)
        evals.append(row)
        for d in _round_rows(n, geo) if geo is not None else []:
            reporter.result("round_deltas", d)
            deltas.append(d)
        reporter.log(
            f"loops={n}: val_loss {r.loss:.4f}  bpb {r.bpb:.4f}"
            + (
                f"  far {r.far_copy_loss:.4f} near {r.near_loss:.4f} (far share {r.far_share:.2%})"
                if r.far_copy_loss is not None and r.near_loss is not None
                else ""
            )
            + ("" if t is None else f"  test_loss {t.loss:.4f}  bpb {t.bpb:.4f}")
        )
        reporter.heartbeat()
    # the interaction batches weigh their mean loop count: together they weigh what `work` counted
    tick.at = sum(spec.interaction_loops) / max(1, len(spec.interaction_loops))
    interactions = (
        _interactions(spec, reporter, model, chunks[:inter_chunks], device, batches) if states else []
    )
    best = min(evals, key=lambda e: e["val_loss"])
    return {
        "depth_evals": evals,
        "round_deltas": deltas,
        "round_interactions": interactions,
        "best_loops": best["loops"],
        "best_val_loss": best["val_loss"],
        "far_distance": distance,
        "test_split": spec.test_split,
    }


def _round_rows(n: int, geo) -> list[dict[str, Any]]:
    """The `round_deltas` rows of the forward with `n` rounds from its geometry `geo`; the change ratio
    of round 1 (no earlier round) is None."""
    columns = zip(geo.rel_change, geo.angle, geo.state_var, geo.change_ratio, geo.bf16_resolution)
    return [
        {
            "loops": n,
            "round": i,
            "rel_change": rel,
            "angle": angle,
            "state_var": var,
            "change_ratio": ratio if math.isfinite(ratio) else None,
            "bf16_resolution": resolution,
        }
        for i, (rel, angle, var, ratio, resolution) in enumerate(columns, start=1)
    ]


def _far_columns(r, distance: int | None) -> dict[str, Any]:
    """The far-copy columns of a `depth_evals` row from evaluation `r` (all None without the split)."""

    split = distance is not None
    return {
        "far_copy_loss": r.far_copy_loss,
        "near_loss": r.near_loss,
        "far_share": r.far_share,
        "far_distance": distance,
        "far_definition": FAR_DEFINITION if split else None,
    }


def _interactions(spec: Spec, reporter, model, chunks, device, batches: dict) -> list[dict[str, Any]]:
    """The `round_interactions` rows of every depth of `interaction_loops`, measured over `chunks` (the
    interaction tokens) in the sweep's batches."""
    from looplab.workers.validation import loop_geometry

    rows = []
    for n in spec.interaction_loops:
        geo = loop_geometry(
            model, chunks, spec.batch_size, device, n, interaction_chunks=len(chunks), **batches
        )
        for i, row_values in enumerate(geo.interaction or [], start=1):
            for j, value in enumerate(row_values, start=1):
                if j > i and math.isfinite(value):
                    d = {"loops": n, "skipped": i, "round": j, "interaction": value}
                    reporter.result("round_interactions", d)
                    rows.append(d)
        reporter.log(f"loops={n}: interaction matrix over {len(chunks) * (chunks.shape[1] - 1)} tokens")
        reporter.heartbeat()
    return rows


def build_parser() -> SpecParser:
    what = "Validation loss of a trained looped LM at many loop counts."
    aliases = {"split_far_copy": ["--far-copy"]}
    return job_parser(
        Spec, "looplab.workers.evaluate.depth_sweep", what, aliases=aliases, required=("checkpoint",)
    )


def print_table(spec: Spec, out: dict[str, Any], args: Any = None) -> None:
    """The sweep as a table, one row per loop count, and the best loop count."""
    far = out["far_distance"]
    print(
        f"depth sweep of {spec.checkpoint}"
        + ("" if far is None else f" (far copies: over {far} tokens back)")
    )
    print(f"{'loops':>6} {'val_loss':>9} {'val_bpb':>8} {'far_copy':>9} {'near':>8} {'far_share':>9}")
    for e in out["depth_evals"]:
        fc, nr, sh = (
            "-" if e[k] is None else f"{e[k]:.4f}" for k in ("far_copy_loss", "near_loss", "far_share")
        )
        test = "" if e.get("test_loss") is None else f"  test {e['test_loss']:.4f} bpb {e['test_bpb']:.4f}"
        print(f"{e['loops']:>6} {e['val_loss']:>9.4f} {e['val_bpb']:>8.4f} {fc:>9} {nr:>8} {sh:>9}{test}")
    print(f"best: {out['best_loops']} loops (val_loss {out['best_val_loss']:.4f})")


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        build_parser(), Spec, run, print_table, desc="depth sweep", argv=argv, before=checkpoint_exists
    )


if __name__ == "__main__":
    raise SystemExit(main())
