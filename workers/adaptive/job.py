"""The adaptive job: a trained checkpoint evaluated with per-token exit rules and KV strategies.

For every cell of the grid (exit rule x threshold x KV strategy, `model.exits` and `model.kv_cache`;
plus the fixed depth `max_rounds` under each strategy, rule "fixed"; the names are
`model.exit_names`'s), on the depth sweep's validation set, through the depth sweep's evaluation loop
(`workers.validation.evaluate`: the same chunks, batches, micro-batches and h0 seeds; threshold 0 under
per_round reproduces the sweep's loss at `max_rounds`):
- validation loss and bits per byte, mean rounds per token and the FLOPs a token-by-token
  implementation spends per token, the exit rule's readouts included (`model.flops.exit_flops`), with
  `equivalent_rounds`, the fixed depth that spends as much: an `adaptive_evals` row;
- the exit rounds as histograms by token position (8 equal bins of the sequence) and by loss bucket
  (the token's loss at the fixed depth max_rounds under per_round: how hard it is): `adaptive_exit_rounds`;
- KV MiB of the strategy at one sequence of `seq_len` tokens in bf16: what the static cache allocates
  (checked against a real allocation) and what the strategy needs given the measured exits;
- task scores (`tasks`, the eval job's generated tasks or task files) with the exits:
  `adaptive_task_scores`;
- with `decode_steps` > 0: decode latency with the exits against the fixed depth, per batch size and
  mode (`masked` / `batch_stop`, `workers.evaluate.decode_bench.exit_decode_cell`), and against the shallowest
  fixed depth as good as the cell (`equal_loss_rounds`, from the strategy's fixed-depth losses at
  1..max_rounds): `adaptive_decodes` (`workers.adaptive.decode`).
`per_round` and `latest` are one function, evaluated once and reported under both names (only their KV
needs differ); `first` and `last_m` change the function even without exits (their rows say so:
`changes_function`). A strategy a model cannot run (e.g. `first` when round 1 is MLP-only) is skipped
with a log line.

Why a kind of its own rather than a depth-sweep option: its grid is not a list of loop counts, its rows
are not keyed by one (four tables of their own), it scores tasks like the eval job, and it times
decoding, so it runs alone on its node like the decode benchmark (`exclusive`), which the sweep does not.

Standalone: `python -m looplab.workers.adaptive --checkpoint runs/x --rules 'state=[0.01,0.1]'`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.exit_names import (
    EMULATED,
    FIXED,
    POST_HOC_RULES,
    CellKey,
    ExitRuleName,
    KVStrategy,
    strategy_label,
)
from looplab.workers.adaptive.decode import decode_rows
from looplab.workers.adaptive.family import (
    emulated_exits,
    family_cost,
    family_forward_flops,
    family_kv_bytes,
    family_strategies,
    refuse_family,
)
from looplab.workers.adaptive.routed import routed_exits, router_rules
from looplab.workers.identity import EXECUTION, spec_to_dict
from looplab.workers.inputs import EVAL_H0_SEED
from looplab.workers.spec_cli import SpecParser, checkpoint_exists, job_parser, run_standalone

DEFAULT_RULES = {
    ExitRuleName.STATE.value: [0.01, 0.03, 0.1],
    ExitRuleName.KL.value: [0.001, 0.01, 0.05],
    ExitRuleName.ENTROPY.value: [0.01, 0.05, 0.2],
    ExitRuleName.ARGMAX.value: [1, 2, 3],
}
POSITION_BINS = 8
LOSS_EDGES = (0.0, 0.5, 1.0, 2.0, 4.0, math.inf)  # nats, of the token's fixed-depth loss
KV_DTYPE = "bfloat16"
# a family's own KV strategy name: it is stored in adaptive_evals.kv_strategy, String(16)
FAMILY_STRATEGY = re.compile(r"[a-z][a-z0-9_]{0,15}")
TABLES = ("adaptive_evals", "adaptive_exit_rounds", "adaptive_task_scores", "adaptive_decodes")


@dataclass(frozen=True)
class Spec:
    checkpoint: str | None = None
    """train artifact dir or checkpoint file (the queue fills it in when the job starts)"""
    rules: dict[str, list[float]] = field(
        default_factory=lambda: {k: list(v) for k, v in DEFAULT_RULES.items()}
    )
    """exit rule -> thresholds: eps for state, kl and entropy, rounds k for argmax; "inf" for infinity"""
    kv_strategies: list[str] = field(default_factory=lambda: [s.value for s in KVStrategy])
    """KV strategies across rounds: per_round, latest, first, last_m; or a family's own (its kv_strategies)"""
    kv_m: int = 2
    """last_m: the last m rounds keep their own cache"""
    min_rounds: int = 2
    """the earliest round a token may stop after (>= 2: the first comparison is rounds 1 and 2)"""
    max_rounds: int | None = None
    """the most rounds a token runs; none: the trained loop count"""
    eval_tokens: int = 32768
    """validation tokens (the first ones of the val shard), as the depth sweep's"""
    batch_size: int = 8
    """sequences per evaluation batch (batch i uses h0 seed h0_seed + i), as the depth sweep's"""
    micro_batch_size: int | None = field(default=None, metadata=EXECUTION)
    """sequences per forward of the validation loss (a batch runs in several forwards of this many; the
    same losses), as the depth sweep's; none: the whole batch"""
    h0_seed: int = EVAL_H0_SEED
    """seed of the initial state h0; the default is training's evaluation seed"""
    tasks: list[str] = field(default_factory=list)
    """tasks scored with every cell's exits: deduction, kinship or .jsonl task files; none by default"""
    n_per_subset: int = 20
    """items per subset of a generated task"""
    task_seed: int = 0
    """seed of the generated tasks"""
    task_limit: int | None = None
    """score only the first N items of each task (none = all)"""
    decode_steps: int = 0
    """timed decode steps per cell, batch size and mode (0: no decode timing)"""
    decode_warmup: int = 2
    """untimed decode steps before the timed ones"""
    decode_prompt: int = 16
    """validation tokens prefilled before decoding"""
    decode_batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    """batch sizes decoded together (rows: validation sequences)"""
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        from looplab.workers.tasks.entries import HARNESS_PREFIX, task_list

        d = fields.with_defaults("adaptive", d, cls)
        min_rounds = fields.integer("min_rounds", d["min_rounds"], lo=2)
        max_rounds = fields.integer("max_rounds", d["max_rounds"], lo=min_rounds, allow_none=True)
        strategies = _strategy_names(d["kv_strategies"])
        tasks = list(d["tasks"]) if isinstance(d["tasks"], list | tuple) else d["tasks"]
        if tasks and any(isinstance(t, str) and t.startswith(HARNESS_PREFIX) for t in tasks):
            raise ConfigError(
                "tasks: harness tasks are not scored with exits; give generated tasks or .jsonl files"
            )
        prompt = fields.integer("decode_prompt", d["decode_prompt"], lo=1)
        return cls(
            checkpoint=fields.optional_text("checkpoint", d["checkpoint"], "a path string"),
            rules=rules_of(d["rules"], min_rounds),
            kv_strategies=strategies,
            kv_m=fields.integer("kv_m", d["kv_m"], lo=1),
            min_rounds=min_rounds,
            max_rounds=max_rounds,
            eval_tokens=fields.integer("eval_tokens", d["eval_tokens"], lo=1),
            batch_size=fields.integer("batch_size", d["batch_size"], lo=1),
            micro_batch_size=fields.integer("micro_batch_size", d["micro_batch_size"], lo=1, allow_none=True),
            h0_seed=fields.integer("h0_seed", d["h0_seed"], lo=0),
            tasks=task_list(tasks) if tasks else [],
            n_per_subset=fields.integer("n_per_subset", d["n_per_subset"], lo=1, hi=100_000),
            task_seed=fields.integer("task_seed", d["task_seed"], lo=0),
            task_limit=fields.integer("task_limit", d["task_limit"], lo=1, allow_none=True),
            decode_steps=fields.integer("decode_steps", d["decode_steps"], lo=0),
            decode_warmup=fields.integer("decode_warmup", d["decode_warmup"], lo=0),
            decode_prompt=prompt,
            decode_batch_sizes=fields.int_list("decode_batch_sizes", d["decode_batch_sizes"], lo=1),
            device=fields.device("device", d["device"]),
        )

    to_dict = spec_to_dict


def refuse_follow(spec: dict[str, Any], followed: dict[str, Any]) -> None:
    """At submission (the grid's one follow-up hook, workers.jobs `refuse_follow`): the `gate` rule needs
    the trained model to have an exit gate, known for looplab's own model from its train spec
    (`model.exit_gate`); a model of another family (`followed["family"]`) is checked against its
    capabilities (`workers.adaptive.family.refuse_family`: the gate, emulated exits, KV strategies)."""
    if followed.get("family") is not None:
        refuse_family(spec, followed)
        return
    refuse_strategies_not_own(spec)
    if ExitRuleName.GATE not in (spec.get("rules") or {}) or followed.get("kind") != "train":
        return
    if (followed.get("spec", {}).get("model") or {}).get("exit_gate", "none") == "none":
        raise ConfigError(
            "rules.gate: the model it follows was trained without an exit gate (model.exit_gate: none); "
            "train with exit_gate entropy, geometric or act, or drop the gate rule"
        )


def _strategy_names(value: Any) -> list[str]:
    """The spec's KV strategy names, in order, once each: looplab's (`KVStrategy`), or names a family's
    cache may offer (checked against the model at submission and at the job's start)."""
    expected = (
        f"a non-empty list of {', '.join(KVStrategy)} or the trained family's own kv_strategies "
        "(lowercase names of at most 16 characters)"
    )
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(f"kv_strategies: expected {expected}, got {value!r}")
    for s in value:
        if not isinstance(s, str) or not FAMILY_STRATEGY.fullmatch(s):
            raise ConfigError(f"kv_strategies: {s!r}: expected {expected}")
    return list(dict.fromkeys(value))


def refuse_strategies_not_own(spec: dict[str, Any]) -> None:
    """looplab's own model runs looplab's KV strategies only: another name is refused naming it."""
    other = [s for s in spec.get("kv_strategies") or () if s not in tuple(KVStrategy)]
    if other:
        raise ConfigError(
            f"kv_strategies: {', '.join(other)}: not a KV strategy of looplab's model (a family's own names "
            f"apply to that family's runs); accepted: {', '.join(KVStrategy)}"
        )


def _refuse_gate_without_gate(spec: Spec, model) -> None:
    """At the job's start: the `gate` rule on a model without the contract's exit-gate capability
    (looplab's model trained with model.exit_gate none; a family without `exit_gate`)."""
    from looplab.model.contract import capabilities

    if ExitRuleName.GATE in spec.rules and not capabilities(model).exit_gate:
        raise ConfigError(
            "rules.gate: this model has no exit gate (trained with model.exit_gate: none, or a family "
            "without the contract's exit_gate); accepted rules: " + ", ".join(POST_HOC_RULES)
        )


def threshold_of(name: str, v: Any) -> float:
    """A threshold as a float: a number, or "inf" / "infinity" for infinity."""
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    return fields.number(name, v, lo=0.0)


def rules_of(value: Any, min_rounds: int) -> dict[str, list[float]]:
    """{rule: sorted thresholds without repeats}, each (rule, threshold) checked by `model.exits.ExitRule`."""
    from looplab.model.exits import ExitRule

    accepted = f"a mapping of {', '.join(ExitRuleName)} to lists of thresholds"
    rules = fields.mapping("rules", value, accepted)
    if not rules:
        raise ConfigError(f"rules: expected {accepted}, got none")
    out = {}
    for rule, thresholds in rules.items():
        fields.choice("rules", rule, tuple(ExitRuleName))
        if not isinstance(thresholds, list | tuple) or not thresholds:
            raise ConfigError(f"rules.{rule}: expected a non-empty list of thresholds, got {thresholds!r}")
        values = sorted({threshold_of(f"rules.{rule}", t) for t in thresholds})
        for t in values:
            ExitRule(rule, t, min_rounds, min_rounds)
        out[rule] = values
    return out


@dataclass(frozen=True)
class Cell:
    """One cell of the grid: an exit rule (None: the fixed depth) under a KV strategy."""

    rule: Any  # model.exits.ExitRule | None
    strategy: KVStrategy
    m: int | None
    emulated: bool = False  # exits emulated from separate forwards (model/exit_emulation.py)

    @property
    def strategy_label(self) -> str:
        return strategy_label(self.strategy, self.m)

    @property
    def key(self) -> str:
        """e.g. `kl<0.01 | per_round`, `fixed | last_m2`, `kl<0.01 | per_round (emulated)`: the rows'
        `config` (`CellKey.label`)."""
        strategy = self.strategy_label + (EMULATED if self.emulated else "")
        return CellKey(FIXED if self.rule is None else self.rule.label, strategy).label()


def cells(spec: Spec, max_rounds: int, emulated: bool = False, own: dict | None = None) -> list[Cell]:
    """The grid's cells, strategy by strategy (`own`: a family's strategies by name, `FamilyKV`)."""
    from looplab.model.exits import ExitRule

    out = []
    for strategy in (KVStrategy(s) if s in tuple(KVStrategy) else (own or {})[s] for s in spec.kv_strategies):
        m = spec.kv_m if strategy is KVStrategy.LAST_M else None
        out.append(Cell(None, strategy, m, emulated))
        for rule, thresholds in spec.rules.items():
            rules = [ExitRule(rule, t, spec.min_rounds, max_rounds) for t in thresholds]
            out += [Cell(r, strategy, m, emulated) for r in rules]
    return out


def _same_function(cell: Cell) -> tuple:
    """Cells computing one function share one evaluation: latest is per_round's function."""
    same = KVStrategy.PER_ROUND if cell.strategy is KVStrategy.LATEST else cell.strategy
    return (cell.rule, same, cell.m)


# ---------------------------------------------------------------------------------- the job


class ExitLM:
    """The exit forward of one cell, also as a model `workers.tasks.likelihood.LoopedScorer` calls."""

    def __init__(self, model, rule, max_rounds: int, emulated: bool = False, strategy=None) -> None:
        self.model, self.rule, self.max_rounds, self.cfg = model, rule, max_rounds, model.cfg
        self.emulated, self.strategy = emulated, strategy  # strategy: a family's own (FamilyKV), or None

    def eval(self) -> ExitLM:
        return self

    def exits(self, idx, h0_seed: int):
        """`model.exits.exit_forward` of idx (B, T): the rule's exits, or every token at max_rounds;
        emulated from separate forwards for a family without the exit capabilities; decoded token by
        token through a family's cache under one of its own strategies."""
        import functools

        import torch

        from looplab.model.exit_emulation import emulated_exit_forward
        from looplab.model.exits import exit_forward, family_exit_forward

        if getattr(self.rule, "routed", False):  # a routed family's own depths (workers/adaptive/routed.py)
            return routed_exits(self.model, idx, self.max_rounds)
        fixed = None if self.rule is not None else torch.full(idx.shape, self.max_rounds, device=idx.device)
        forward = emulated_exit_forward if self.emulated else exit_forward
        if self.strategy is not None:
            forward = functools.partial(family_exit_forward, strategy=str(self.strategy))
        return forward(
            self.model, idx, self.rule, h0_seed=h0_seed, exits=fixed, max_rounds=self.max_rounds, stop=True
        )

    def __call__(self, idx, loops=None, h0_seed: int = 0):
        from looplab.model.output import LMOutput

        return LMOutput(logits=self.exits(idx, h0_seed).logits)


class ExitCounts:
    """The exit rounds of one cell's forwards: tokens per (bucket, exit round) by token position and by
    loss bucket (`hardness`, each token's loss (N, T) at the fixed depth), and their sum."""

    def __init__(self, seq_len: int, hardness) -> None:
        import torch

        self.position_bin = (torch.arange(seq_len) * POSITION_BINS // seq_len)[None, :]  # (1, T)
        self.loss_edges = torch.tensor(LOSS_EDGES[1:-1])
        self.hardness = hardness
        self.rounds = 0
        self.hist: dict[str, dict[tuple[int, int], int]] = {"position": {}, "loss": {}}

    def add(self, rows: slice, out, ce) -> None:
        """`workers.validation.evaluate`'s `on_forward`: the exit rounds of the forward over `rows`."""
        import torch

        rounds = out.exit_round.cpu()  # (B, T)
        self.rounds += int(rounds.sum())
        loss_bin = torch.bucketize(self.hardness[rows], self.loss_edges, right=True)
        for split, bins in (("position", self.position_bin.expand_as(rounds)), ("loss", loss_bin)):
            pairs, counts = torch.stack([bins.flatten(), rounds.flatten()]).unique(dim=1, return_counts=True)
            for (b, r), k in zip(pairs.t().tolist(), counts.tolist()):
                self.hist[split][(b, r)] = self.hist[split].get((b, r), 0) + k


def _sweep_evaluate(model, chunks, spec: Spec, device, token_bytes, tick, **kw):
    """`workers.validation.evaluate`, the depth sweep's loop, in the spec's batches, micro-batches and h0
    seeds; `tick` once per batch."""
    from looplab.workers.validation import evaluate

    return evaluate(
        model,
        chunks,
        spec.batch_size,
        device,
        token_bytes,
        h0_seed=spec.h0_seed,
        on_batch=lambda _: tick(),
        micro_batch_size=spec.micro_batch_size,
        **kw,
    )


def _evaluate(lm: ExitLM, chunks, spec: Spec, device, token_bytes, hardness, tick) -> dict[str, Any]:
    """Loss, bits per byte, mean rounds and exit-round histograms of one cell over the chunks: the depth
    sweep's evaluation with the cell's exit forward."""
    counts = ExitCounts(chunks.shape[1] - 1, hardness)
    r = _sweep_evaluate(
        lm.model, chunks, spec, device, token_bytes, tick, forward=lm.exits, on_forward=counts.add
    )
    return {
        "loss": r.loss,
        "bpb": r.bpb,
        "tokens": r.tokens,
        "mean_rounds": counts.rounds / r.tokens,
        "hist": counts.hist,
    }


def _hardness(model, chunks, spec: Spec, device, token_bytes, max_rounds: int, tick):
    """Each token's loss (N, T) at the fixed depth max_rounds (per_round): its loss bucket."""
    import torch

    losses = torch.empty(len(chunks), chunks.shape[1] - 1)

    def keep(rows: slice, out, ce) -> None:
        losses[rows] = ce.cpu()

    _sweep_evaluate(model, chunks, spec, device, token_bytes, tick, loops=max_rounds, on_forward=keep)
    return losses


def _hist_rows(key: str, hist: dict, seq_len: int) -> list[dict[str, Any]]:
    rows = []
    for split, counts in hist.items():
        for (b, r), k in sorted(counts.items()):
            if split == "position":
                lo, hi = b * seq_len / POSITION_BINS, (b + 1) * seq_len / POSITION_BINS
            else:
                lo, hi = LOSS_EDGES[b], LOSS_EDGES[b + 1]
            rows.append(
                {
                    "config": key,
                    "split": split,
                    "bucket": b,
                    "bucket_lo": lo,
                    "bucket_hi": hi,
                    "round": r,
                    "count": k,
                }
            )
    return rows


def _share(hist: dict) -> dict[int, float]:
    """{exit round: fraction of the tokens} from the position histogram (it counts every token once)."""
    per_round: dict[int, int] = {}
    for (_, r), k in hist["position"].items():
        per_round[r] = per_round.get(r, 0) + k
    total = sum(per_round.values())
    return {r: k / total for r, k in sorted(per_round.items())}


def _max_rounds(spec: Spec, cfg) -> int:
    """The deepest round the cells run (the trained loop count unless max_rounds is given), checked
    against min_rounds, and the decode timing's tokens against the checkpoint's context."""
    R = cfg.loops if spec.max_rounds is None else spec.max_rounds
    if R < spec.min_rounds:
        raise ConfigError(
            f"max_rounds: the trained loop count {R} is below min_rounds {spec.min_rounds}; give max_rounds"
        )
    if spec.decode_steps and spec.decode_prompt + spec.decode_warmup + spec.decode_steps > cfg.seq_len:
        raise ConfigError(
            f"decode_steps: decode_prompt + decode_warmup + decode_steps must fit seq_len {cfg.seq_len}"
        )
    return R


def run(spec: Spec, reporter, artifact_dir: str | Path | None) -> dict[str, Any]:
    from looplab.workers.device import resolve_device
    from looplab.workers.inputs import eval_inputs
    from looplab.workers.tasks.likelihood import LoopedScorer, checkpoint_tokenizer
    from looplab.workers.tasks.scoring import score_items, subset_rows

    device = resolve_device(spec.device)
    ev = eval_inputs(spec.checkpoint, spec.eval_tokens, device)
    model, cfg, train_spec, chunks, token_bytes = ev.model, ev.cfg, ev.train_spec, ev.chunks, ev.token_bytes
    R = _max_rounds(spec, cfg)
    emulated = emulated_exits(model, spec.to_dict(), ev.train_spec, R, reporter)
    _refuse_gate_without_gate(spec, model)  # after a family's own refusals, which name it
    family = ev.train_spec.get("family") is not None  # another family: its own FLOPs and KV strategies
    if not family:
        refuse_strategies_not_own(spec.to_dict())
    own = family_strategies(model) if family else {}
    views, kv_bytes = (
        _family_views(model, spec, own, cfg.seq_len, R)
        if family
        else _strategy_views(model, spec, R, reporter)
    )
    flops_at = family_forward_flops(model, cfg, R) if family else None
    grid = [c for c in cells(spec, R, emulated, own) if c.strategy in views]
    grid += [Cell(rule, KVStrategy.PER_ROUND, None) for rule in router_rules(model, spec)]
    items = (
        _task_items(spec, Path(artifact_dir or default_out(spec.checkpoint)) / "tasks") if spec.tasks else {}
    )
    tokenizer = checkpoint_tokenizer(train_spec, spec.checkpoint) if items else None
    n_batches = -(-len(chunks) // spec.batch_size)
    per_cell = len(items) + (2 * len(spec.decode_batch_sizes) if spec.decode_steps else 0)
    total = n_batches * (1 + len({_same_function(c) for c in grid})) + len(grid) * per_cell
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        reporter.progress(done, total)

    hardness = _hardness(model, chunks, spec, device, token_bytes, R, tick)
    evaluated: dict[tuple, dict] = {}  # one evaluation per function (latest is per_round's)
    scored: dict[tuple, list] = {}  # (function, task) -> its score rows
    fixed_ms: dict[tuple, dict] = {}  # (strategy, batch, mode, depth) -> a fixed depth's decode timing
    fixed_losses: dict[tuple, dict] = {}  # a function -> its fixed depths' validation losses
    out: dict[str, list] = {t: [] for t in TABLES}
    for cell in grid:
        view, fn = views[cell.strategy], _same_function(cell)
        lm = ExitLM(view, cell.rule, R, emulated, strategy=cell.strategy if cell.strategy in own else None)
        if fn not in evaluated:
            evaluated[fn] = _evaluate(lm, chunks, spec, device, token_bytes, hardness, tick)
        r = evaluated[fn]
        row = _eval_row(cell, r, view.cfg, cfg, spec, R, flops_at, kv_bytes.get(cell.strategy))
        _emit(reporter, out, "adaptive_evals", [row])
        _emit(reporter, out, "adaptive_exit_rounds", _hist_rows(cell.key, r["hist"], cfg.seq_len))
        for name, (task_items, category) in items.items():
            if (fn, name) not in scored:
                scorer = LoopedScorer(
                    lm, tokenizer, loops=R, h0_seed=spec.h0_seed, batch_size=spec.batch_size, device=device
                )
                scored[(fn, name)] = subset_rows(score_items(task_items, scorer.loglikelihood))
            rows = [
                {"config": cell.key, "task": name, "category": category, **row} for row in scored[(fn, name)]
            ]
            _emit(reporter, out, "adaptive_task_scores", rows)
            tick()
        if spec.decode_steps:
            at_R = evaluated[_same_function(Cell(None, cell.strategy, cell.m))]["loss"]  # its fixed cell's
            losses = _fixed_losses(view, cell, chunks, spec, device, token_bytes, R, fixed_losses, at_R)
            rows = decode_rows(view, cfg, cell, R, chunks, spec, device, fixed_ms, tick, r["loss"], losses)
            _emit(reporter, out, "adaptive_decodes", rows)
        reporter.log(f"{cell.key}: val_loss {r['loss']:.4f}, {r['mean_rounds']:.2f} rounds/token")
        reporter.heartbeat()
    return {**out, "max_rounds": R, "kv_bytes": {str(s): n for s, n in kv_bytes.items()}}


def _family_views(model, spec: Spec, own: dict, seq_len: int, R: int) -> tuple[dict, dict]:
    """A family's ({strategy: model}, {strategy: KV bytes of one seq_len sequence}): per_round (its
    parallel forward, no cache) and those of its own asked for (`own`), their bytes checked against the
    cache's tensors (`family_kv_bytes`)."""
    asked = [s for s in spec.kv_strategies if s in own]
    views = {KVStrategy.PER_ROUND: model, **{own[s]: model for s in asked}}
    return views, {own[s]: family_kv_bytes(model, s, seq_len, R) for s in asked}


def _strategy_views(model, spec: Spec, R: int, reporter) -> tuple[dict, dict]:
    """({strategy: the model under it}, {strategy: KV bytes of one seq_len sequence in bf16}); the
    analytic bytes are checked against a real allocation, and a strategy the model cannot run is
    skipped with a warning."""
    import torch

    from looplab.model.counts import kv_strategy_bytes
    from looplab.model.exits import kv_view

    views, kv_bytes = {}, {}
    seq = model.cfg.seq_len
    for strategy in map(KVStrategy, spec.kv_strategies):
        m = spec.kv_m if strategy is KVStrategy.LAST_M else None
        try:
            views[strategy] = kv_view(model, strategy, R, m)
        except ConfigError as e:
            reporter.log(f"kv_strategy {strategy}: skipped, this model cannot run it ({e})", level="WARNING")
            continue
        held = views[strategy].setup_cache(1, seq, dtype=getattr(torch, KV_DTYPE), loops=R).nbytes()
        kv_bytes[strategy] = kv_strategy_bytes(model.cfg, seq, 1, strategy, R, m, dtype=KV_DTYPE)[0]
        if held != kv_bytes[strategy]:  # the analytic count is what the page shows: it must be the truth
            raise RuntimeError(
                f"{strategy}: the cache holds {held} bytes, kv_strategy_bytes says {kv_bytes[strategy]}"
            )
    return views, kv_bytes


def _eval_row(
    cell: Cell, r: dict, view_cfg, cfg, spec: Spec, R: int, flops_at=None, family_kv: int | None = None
) -> dict[str, Any]:
    """The `adaptive_evals` row of a cell from its evaluation `r`: FLOPs spent (the rule's readouts
    included) and KV bytes (allocated, needed) from the measured exit rounds; for emulated exits
    and for a model of another family (`flops_at`: its forward FLOPs per loop count)
    `workers.adaptive.family.family_cost`."""
    share = _share(r["hist"])
    cost = (
        _native_cost(cell, share, view_cfg, cfg, R)
        if flops_at is None
        else family_cost(cell.rule, share, flops_at, R, family_kv)
    )
    return {
        "config": cell.key,
        "rule": FIXED if cell.rule is None else str(cell.rule.rule),
        "threshold": None if cell.rule is None else cell.rule.threshold,
        "kv_strategy": str(cell.strategy),
        "kv_m": cell.m,
        "min_rounds": spec.min_rounds,
        "max_rounds": R,
        "changes_function": cell.strategy.changes_function,
        "val_loss": r["loss"],
        "val_bpb": r["bpb"],
        "tokens": r["tokens"],
        "mean_rounds": r["mean_rounds"],
        **cost,
    }


def _native_cost(cell: Cell, share: dict[int, float], view_cfg, cfg, R: int) -> dict[str, Any]:
    from looplab.model.counts import kv_strategy_bytes
    from looplab.model.flops import equivalent_rounds, exit_flops, fixed_depth_flops

    seq = cfg.seq_len
    if cell.rule is None:
        spent, rule_flops = fixed_depth_flops(view_cfg, R, seq), 0.0
        eq = equivalent_rounds(cfg, spent, seq)
    else:
        f = exit_flops(view_cfg, share, cell.rule, seq, reference=cfg)
        spent, rule_flops, eq = f.total, f.rule, f.equivalent_rounds
    allocated, needed = kv_strategy_bytes(
        cfg, seq, 1, cell.strategy, R, cell.m, dtype=KV_DTYPE, exit_share=share
    )
    return {
        "equivalent_rounds": eq,
        "forward_flops_per_token": spent,
        "rule_flops_per_token": rule_flops,
        "fixed_flops_per_token": fixed_depth_flops(cfg, R, seq),
        "kv_mib": allocated / 2**20,
        "kv_mib_needed": needed / 2**20,
    }


def default_out(checkpoint: str) -> Path:
    """Where a standalone run keeps its generated task files: `adaptive/` beside the checkpoint."""
    path = Path(checkpoint)
    return (path if path.is_dir() else path.parent) / "adaptive"


def _emit(reporter, out: dict, table: str, rows: list[dict]) -> None:
    for row in rows:
        reporter.result(table, row)
    out[table] += rows


def _task_items(spec: Spec, task_dir: Path) -> dict[str, tuple[list, str | None]]:
    """{task name: (items, category)} of the spec's tasks (generated into `task_dir`, or files)."""
    from looplab.workers.tasks.entries import category, local_items, task_name

    out = {}
    for entry in spec.tasks:
        name = task_name(entry)
        items = local_items(entry, task_dir, spec.n_per_subset, spec.task_seed, spec.task_limit)[1]
        out[name] = (items, category(name, {}))
    return out


def _fixed_losses(
    view, cell: Cell, chunks, spec: Spec, device, token_bytes, R: int, cache: dict, at_R: float
) -> dict:
    """{r: validation loss of the fixed depth r} for r = 1..R under the cell's KV strategy (its model
    `view` with every token exiting at round r: the forward a rule's exits at r take), once per function
    (`cache`); depth R is the strategy's fixed cell, already evaluated (`at_R`). The fixed depth at
    equal loss of the decode rows (`workers.adaptive.decode`)."""
    key = _same_function(Cell(None, cell.strategy, cell.m))
    if key not in cache:
        cache[key] = {
            **{
                r: _sweep_evaluate(
                    view, chunks, spec, device, token_bytes, lambda: None, forward=lm.exits
                ).loss
                for r, lm in ((r, ExitLM(view, None, r)) for r in range(1, R))
            },
            R: at_R,
        }
    return cache[key]


# ---------------------------------------------------------------------------------- CLI


def build_parser() -> SpecParser:
    what = "Loss, compute and decode latency of a trained looped LM with per-token exit rules."
    return job_parser(
        Spec,
        "looplab.workers.adaptive",
        what,
        out_help="folder for generated task files",
        required=("checkpoint",),
    )


def print_table(spec: Spec, out: dict[str, Any], args: Any = None) -> None:
    """One row per cell: loss, mean rounds, equivalent rounds (FLOPs incl. the rule), KV MiB."""
    print(f"adaptive compute of {spec.checkpoint} (max {out['max_rounds']} rounds)")
    print(f"{'config':<28} {'val_loss':>9} {'rounds':>7} {'eq_rounds':>9} {'kv_MiB':>7} {'needed':>7}")
    for r in out["adaptive_evals"]:
        print(
            f"{r['config']:<28} {r['val_loss']:>9.4f} {r['mean_rounds']:>7.2f} {r['equivalent_rounds']:>9.2f} "
            f"{_mib(r['kv_mib']):>7} {_mib(r['kv_mib_needed']):>7}"
        )


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> int:
    return run_standalone(
        build_parser(), Spec, run, print_table, desc="adaptive", argv=argv, before=checkpoint_exists
    )


if __name__ == "__main__":
    raise SystemExit(main())
