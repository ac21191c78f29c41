"""A family's module as the jobs hold it (`FamilyLM`): one interface over looplab's own model and any
family (`build_model`), with the counts and facts recorded with a run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from looplab.families.looped.model import LoopedLM
from looplab.model.contract.capabilities import Capabilities, capabilities, logits_of, looped_capabilities
from looplab.model.contract.conformance import split_dependent
from looplab.model.contract.flops import measure_flops_per_token
from looplab.model.contract.resolution import Family, instantiate, resolve_family
from looplab.model.output import LMOutput


class FamilyLM(nn.Module):
    """A family's module behind the interface the jobs call on `LoopedLM`: `forward(idx, targets,
    loops, h0_seed) -> LMOutput` with per-row loop counts, `sample_loops`, `param_groups`,
    `compile_parts`, and the optional capabilities passed through. Rows with different loop counts run
    as one forward per count (the contract's loop count is an int); a `model.init.RowKey` given as
    h0_seed reaches a family that takes `row_key` (its rows cut to each forward's)."""

    def __init__(self, inner: nn.Module, cfg: Any, caps: Capabilities) -> None:
        super().__init__()
        self.inner, self.cfg, self.caps = inner, cfg, caps

    def forward(self, idx: Tensor, targets: Tensor | None = None, loops=None, h0_seed=None) -> LMOutput:
        counts = self._counts(self.cfg.loops if loops is None else loops, idx.shape[0])
        if targets is not None and self.caps.training_loss and self.inner.training:
            return self._objective(idx, targets, counts, h0_seed)
        if len(set(counts)) == 1:
            logits = self._logits(idx, counts[0], h0_seed, None)
        else:
            logits = None
            for n in sorted(set(counts)):
                rows = [b for b, c in enumerate(counts) if c == n]
                part = self._logits(idx[rows], n, h0_seed, rows)
                if logits is None:
                    logits = part.new_empty((idx.shape[0], *part.shape[1:]))
                logits[rows] = part
        if targets is None:
            return LMOutput(logits=logits)
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)
        return LMOutput(logits=logits, loss=loss)

    def _objective(self, idx: Tensor, targets: Tensor, counts: list[int], key) -> LMOutput:
        """The family's own training objective (the contract's `training_loss(idx, targets, loops=n)`:
        an object with `.loss`, a scalar to minimise, `.logits`, and optionally `.task_loss` and
        `.expected_rounds`), one call per loop count, each weighted by its share of the rows."""
        parts: dict[str, Tensor] = {}
        logits = None
        for n in sorted(set(counts)):
            rows = [b for b, c in enumerate(counts) if c == n]
            every = len(rows) == len(counts)
            kwargs = self._row_key(key, None if every else rows)
            sub = (idx, targets) if every else (idx[rows], targets[rows])
            out = self.inner.training_loss(*sub, loops=n, **kwargs)
            share = len(rows) / len(counts)
            for name in ("loss", "task_loss", "expected_rounds"):
                value = getattr(out, name, None)
                if value is not None:
                    parts[name] = parts.get(name, 0) + value * share
            part = logits_of(out).float()
            if logits is None:
                logits = part if every else part.new_empty((idx.shape[0], *part.shape[1:]))
            if not every:
                logits[rows] = part
        if not {"task_loss", "expected_rounds"} <= set(parts):  # a learned exit's figures come in pairs
            parts.pop("task_loss", None), parts.pop("expected_rounds", None)
        return LMOutput(logits, parts["loss"], parts.get("task_loss"), parts.get("expected_rounds"))

    def _row_key(self, key, rows: list[int] | None) -> dict[str, Any]:
        """The forward's `row_key` argument for rows `rows` of the batch (all when None), if it takes one."""
        if not (self.caps.row_key and hasattr(key, "rows")):
            return {}
        return {
            "row_key": key
            if rows is None
            else dataclasses.replace(key, rows=tuple(key.rows[r] for r in rows))
        }

    @staticmethod
    def _counts(loops, batch: int) -> list[int]:
        if isinstance(loops, int):
            return [loops] * batch
        return [int(c) for c in (loops.tolist() if isinstance(loops, Tensor) else loops)]

    def _logits(self, idx: Tensor, loops: int, key, rows: list[int] | None) -> Tensor:
        return logits_of(self.inner(idx, loops=loops, **self._row_key(key, rows))).float()

    def sample_loops(self, batch_size: int, step: int, seed: int = 0) -> Tensor:
        """The family's sampler, else the fixed `loops` of the run's config for every row."""
        if self.caps.sample_loops:
            return torch.as_tensor(self.inner.sample_loops(batch_size, step, seed), dtype=torch.long).cpu()
        return torch.full((batch_size,), self.cfg.loops, dtype=torch.long)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """The family's groups, else every parameter in "other" (AdamW on all)."""
        if self.caps.param_groups:
            groups = self.inner.param_groups()
            return {"matrix": list(groups.get("matrix", [])), **{k: list(v) for k, v in groups.items()}}
        return {"matrix": [], "other": list(self.parameters())}

    def param_split(self) -> dict[str, list[nn.Parameter]]:
        return self.inner.param_split() if self.caps.param_split else {}

    def compile_parts(self, **compile_kwargs) -> FamilyLM:
        """A family is run as it is: how to compile it is the family's own business."""
        return self

    def round_states(self, idx: Tensor, loops: int, h0_seed=None, skip_round: int | None = None) -> Tensor:
        return self.inner.round_states(idx, loops, skip_round=skip_round)

    def flops_per_token(self, loops: int) -> float:
        return float(self.inner.flops_per_token(loops))

    def exit_gate(self, h: Tensor, t: int) -> Tensor:
        return self.inner.exit_gate(h, t)

    # the readout at any round and the rounds with a keep mask (as families/looped/model.py's), for the exit rules
    def readout(self, h: Tensor, idx: Tensor, ctx=None) -> Tensor:
        return logits_of(self.inner.readout(h, idx, ctx)).float()

    def run_rounds(self, *args, **kwargs) -> Tensor:
        return self.inner.run_rounds(*args, **kwargs)

    def rope(self, n: int):
        return self.inner.rope(n)

    # the family's own KV cache, timed by the decode bench against its own byte count
    def setup_cache(self, batch: int, max_len: int, **kwargs):
        return self.inner.setup_cache(batch, max_len, **kwargs)

    def prefill(self, idx: Tensor, cache) -> Tensor:
        return logits_of(self.inner.prefill(idx, cache)).float()

    def decode_step(self, tokens: Tensor, cache, **kwargs) -> Tensor:
        return logits_of(self.inner.decode_step(tokens, cache, **kwargs)).float()

    def kv_cache_bytes(self, batch: int, max_len: int, dtype=None) -> int | None:
        """The family's own count of a cache's bytes (`kv_cache_bytes(batch, max_len, dtype=...)`),
        None when it has none (the decode bench then reports the bytes the cache holds)."""
        count = getattr(self.inner, "kv_cache_bytes", None)
        return None if count is None else int(count(batch, max_len, dtype=dtype))


def gate_reading(model: nn.Module) -> tuple[str, float]:
    """(objective, eps) by which the `gate` exit rule accumulates `model`'s `exit_gate` stop probabilities
    (`model.exit_gate.cumulative_mass`): looplab's model, also wrapped as a family's (`FamilyLM`), by the
    objective it was trained with (act sums them); another family's as an exit distribution
    (`STOP_PROBABILITIES`: the contract's exit_gate gives the probability of stopping after round t)."""
    from looplab.model.exit_gate import STOP_PROBABILITIES

    inner = model.inner if isinstance(model, FamilyLM) else model
    if isinstance(inner, LoopedLM):
        return inner.cfg.exit_gate, inner.cfg.gate_eps
    return STOP_PROBABILITIES, 0.0


@dataclass
class Built:
    """A model built through the contract: the module the jobs call, its capabilities, its family."""

    module: nn.Module
    capabilities: Capabilities
    family: Family

    @property
    def builtin(self) -> bool:
        return self.family.builtin


def family_settings(cfg: Any, config: dict[str, Any] | None) -> dict[str, Any]:
    """A family's config as its factory gets it: the grid's `family_config` plus the keys looplab sets
    from the run (`PROVIDED_KEYS`: the tokenizer's vocabulary and the context length)."""
    return {**(config or {}), "vocab_size": cfg.vocab_size, "seq_len": cfg.seq_len}


def build_model(cfg: Any, family: str | None = None, config: dict[str, Any] | None = None) -> Built:
    """The model of a run: `LoopedLM(cfg)` for the built-in family (no wrapper: its speed is its own),
    else the family's module built from `family_settings(cfg, config)` behind `FamilyLM`. `cfg` is the
    run's ModelConfig: for another family it carries the vocabulary, context and fixed loop count."""
    fam = resolve_family(family)
    if fam.builtin:
        module = LoopedLM(cfg)
        return Built(module, looped_capabilities(module), fam)
    inner = instantiate(fam, family_settings(cfg, config))
    caps = capabilities(inner, fam.factory)
    return Built(FamilyLM(inner, cfg, caps), caps, fam)


@dataclass(frozen=True)
class FamilyFlops:
    """A family's training FLOPs per token as the trainer accounts them (the fields of the FLOP model's
    breakdown it reads): all useful, no padded rounds (rows of different loop counts run as separate
    forwards), `measured` when FlopCounterMode counted them rather than the family."""

    total: float
    measured: bool
    padding_waste: float = 0.0
    recurrent: float = 0.0
    padded: float = 0.0

    @property
    def useful(self) -> float:
        return self.total

    @property
    def forward(self) -> float:
        return self.total / 3


def family_flops(built: Built, vocab: int, seq_len: int, loops: int) -> FamilyFlops:
    """Training FLOPs per token of a family's model at `loops`: its own `flops_per_token`, else measured
    once at the run's shapes."""
    if built.capabilities.flops_per_token:
        return FamilyFlops(float(built.module.flops_per_token(loops)), measured=False)
    inner = built.module.inner if isinstance(built.module, FamilyLM) else built.module
    return FamilyFlops(measure_flops_per_token(inner, vocab, seq_len, loops), measured=True)


def param_counts(built: Built) -> dict[str, int]:
    """{"total", "non_embedding"} parameters of a family's model; the embedding is known only from its
    `param_split` (else non_embedding = total)."""
    total = sum(p.numel() for p in built.module.parameters())
    split = built.module.param_split() if built.capabilities.param_split else {}
    embedding = sum(p.numel() for p in split.get("embedding", []))
    return {"total": total, "non_embedding": total - embedding}


@dataclasses.dataclass(frozen=True)
class FamilyFacts:
    """What a run records of another family: its parameter counts, training FLOPs per token (its own,
    else measured once) and whether its forward is split-dependent, beside what it offers and what
    stands in for the rest."""

    built: Built
    param_counts: dict[str, int]
    flops: Any  # model.flops.FlopBreakdown-like: `.total`, `.measured`, `.padding_waste`
    split_dependent: bool

    def record(self) -> dict[str, Any]:
        """family.json: the family, its package and version, capabilities, fallbacks and counts."""
        built = self.built
        return {
            "family": built.family.name,
            "package": built.family.package,
            "version": built.family.version,
            "capabilities": dataclasses.asdict(built.capabilities),
            "fallbacks": built.capabilities.fallbacks(),
            "split_dependent": self.split_dependent,
            "flops_per_token": self.flops.total,
            "flops_measured": self.flops.measured,
            "n_params": self.param_counts["total"],
        }

    def describe(self) -> str:
        """The run's log line about its family."""
        family, caps = self.built.family, self.built.capabilities
        how = "measured with FlopCounterMode" if self.flops.measured else "the family's own"
        split = "; split-dependent: resumes only on the same micro-batch and worker split"
        return (
            f"family {family.name!r} {family.version or ''}: {self.flops.total:.4g} training FLOPs per token "
            f"({how}); fallbacks: {caps.fallbacks() or 'none'}" + (split if self.split_dependent else "")
        )


def family_facts(built: Built, cfg: Any) -> FamilyFacts:
    """`FamilyFacts` of a built family at config `cfg` (its vocabulary, sequence length and loops); the
    probes draw nothing the run would have drawn (the global generator is restored)."""
    seed = torch.random.get_rng_state()
    try:
        counts = param_counts(built)
        flops = family_flops(built, cfg.vocab_size, cfg.seq_len, cfg.loops)
        dependent = split_dependent(built.module, built.capabilities, cfg.vocab_size)
    finally:
        torch.random.set_rng_state(seed)
    return FamilyFacts(built, counts, flops, dependent)


def forward_flops_per_token(module: nn.Module, vocab: int, seq_len: int, loops: int) -> float:
    """Forward FLOPs per token at `loops` of a family's model as the jobs hold it (`FamilyLM`): a third
    of its training FLOPs per token, the family's own `flops_per_token`, else measured once at `seq_len`
    (`measure_flops_per_token`)."""
    if not isinstance(module, FamilyLM):
        raise TypeError(f"forward_flops_per_token: expected a family's FamilyLM, got {type(module).__name__}")
    if module.caps.flops_per_token:
        return float(module.flops_per_token(loops)) / 3
    return measure_flops_per_token(module.inner, vocab, seq_len, loops) / 3
