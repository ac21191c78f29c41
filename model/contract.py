"""The model-family contract: what a looped model must offer for every looplab job to run on it.

A *family* is a callable `factory(config: dict) -> torch.nn.Module`, named as "package.module:factory"
(importable wherever its jobs run) or by a short name registered in the entry-point group
`looplab.models`. looplab's own `LoopedLM` is the built-in family "looped" (`BUILTIN`), reached
through the same `build_model` as every other. docs/own-model.md states the contract for people.

Required: `forward(idx, loops=n)` with token ids (B, T) and an int loop count, returning logits
(B, T, V) as a floating tensor, or an object with `.logits`. Everything else is optional and
discovered (`Capabilities`); each missing capability has a fallback the jobs use and record:

    sample_loops(batch, step, seed) -> (B,) ints     else the grid's fixed `loops`
    forward(..., row_key=(seed, step, rows))         else, if the forward is random, split-dependent
    round_states(idx, loops, skip_round=None)        else no state measures in a depth sweep
    readout(h, idx, ctx), run_rounds(..., keep=), rope else exits emulated from separate forwards
    exit_gate(h, t) -> (B, T) stop probability       else no learned exit: the `gate` rule is refused
    setup_cache / prefill / decode_step              else decoding by full recompute
    kv_strategies(), step_context(cache)             else the adaptive job's KV strategy is per_round
    flops_per_token(loops) -> float                  else measured with FlopCounterMode
    param_groups() -> {"matrix": [..], "other": [..]} else AdamW on every parameter
    param_split() -> {"once", "recurrent", "embedding"} else left empty
    factory.validate_config(config)                  else the factory's own exception

`check_family(family, config)` is the conformance check: a short CPU forward at the smallest shapes
that refuses a family which does not import, whose factory raises or returns no module, whose forward
takes no loop count, returns logits of the wrong shape or dtype, or ignores its loop count (checked on
a copy with every parameter randomised, so a zero-initialised residual branch cannot hide the loop).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.metadata
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from looplab.model.errors import ConfigError
from looplab.model.looped import LMOutput, LoopedLM
from looplab.names import import_family_module

BUILTIN = "looped"
ENTRY_POINT_GROUP = "looplab.models"
# The keys looplab sets in every family's config: the tokenizer's vocabulary and the context length.
PROVIDED_KEYS = ("vocab_size", "seq_len")
EXPECTED_NAME = (
    f"'package.module:factory' importable on this node, a short name registered in the entry-point "
    f"group {ENTRY_POINT_GROUP!r}, or {BUILTIN!r}"
)
# The smallest shapes of the conformance forward: two rows (a batch), four positions.
CHECK_BATCH, CHECK_LEN = 2, 4


class FamilyError(ConfigError):
    """A family that cannot be used; the message names the family and what was expected."""


@dataclass(frozen=True)
class Family:
    """A resolved family: the name as given, its factory, and the package (and version) it comes from."""

    name: str
    factory: Callable[[dict[str, Any]], nn.Module]
    package: str | None = None
    version: str | None = None

    @property
    def builtin(self) -> bool:
        return self.name == BUILTIN


def _looped_factory(config: dict[str, Any]) -> LoopedLM:
    """The built-in family: a `LoopedLM` of the `ModelConfig` fields in `config`."""
    from looplab.model.config import ModelConfig

    return LoopedLM(ModelConfig.from_dict(config))


def _package_version(module_name: str) -> tuple[str, str | None]:
    top = module_name.split(".")[0]
    try:
        return top, importlib.metadata.version(top)
    except importlib.metadata.PackageNotFoundError:
        return top, None


def resolve_family(name: str | None) -> Family:
    """The family named `name` (None: the built-in one); FamilyError naming it when it cannot be found."""
    if name is None or name == BUILTIN:
        from importlib.metadata import version

        return Family(BUILTIN, _looped_factory, "looplab", _safe(version, "looplab"))
    if not isinstance(name, str) or not name.strip():
        raise FamilyError(f"family: expected {EXPECTED_NAME}; got {name!r}")
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            module = import_family_module(module_name)
        except Exception as e:  # any failure of the import is the family's, reported as such
            raise FamilyError(
                f"family {name!r}: module {module_name!r} does not import ({type(e).__name__}: {e}); "
                f"expected {EXPECTED_NAME}"
            ) from None
        factory = getattr(module, attr, None)
        if not callable(factory):
            raise FamilyError(
                f"family {name!r}: module {module_name!r} has no callable {attr!r}; expected "
                "a factory(config: dict) -> torch.nn.Module"
            )
        return Family(name, factory, *_package_version(module_name))
    found = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not found:
        known = sorted(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
        raise FamilyError(
            f"family {name!r}: not registered in entry-point group {ENTRY_POINT_GROUP!r} "
            f"(registered: {', '.join([BUILTIN, *known])}); expected {EXPECTED_NAME}"
        )
    try:
        factory = found[0].load()
    except Exception as e:
        raise FamilyError(f"family {name!r}: entry point {found[0].value!r} does not load ({e})") from None
    dist = found[0].dist
    return Family(name, factory, dist.name if dist else None, dist.version if dist else None)


def _safe(fn: Callable, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


@dataclass(frozen=True)
class Capabilities:
    """Which optional parts of the contract a module has (see the module docstring for each fallback)."""

    sample_loops: bool = False
    row_key: bool = False
    round_states: bool = False
    readout: bool = False
    exit_gate: bool = False
    kv_cache: bool = False
    kv_exits: bool = False
    flops_per_token: bool = False
    param_groups: bool = False
    param_split: bool = False
    validate_config: bool = False

    def fallbacks(self) -> dict[str, str]:
        """What looplab does instead of each missing capability: recorded with a run's results."""
        said = {
            "sample_loops": "the grid's fixed loops",
            "row_key": "split-dependent if the forward is random: resume only on the same split",
            "round_states": "no state measures in a depth sweep",
            "readout": "exits emulated from separate forwards",
            "exit_gate": "no learned exit: the gate exit rule is refused",
            "kv_cache": "decoding times full recompute",
            "kv_exits": "exits only with the KV function of per_round",
            "flops_per_token": "measured once with FlopCounterMode",
            "param_groups": "AdamW on every parameter",
            "param_split": "left empty",
            "validate_config": "the factory's own exception",
        }
        return {k: v for k, v in said.items() if not getattr(self, k)}


# LoopedLM has every capability: known without looking, so its path does no extra work; the exit gate
# only when its config has one (`looped_capabilities`).
LOOPED_CAPABILITIES = Capabilities(*(True,) * len(dataclasses.fields(Capabilities)))


def looped_capabilities(module: LoopedLM) -> Capabilities:
    """A `LoopedLM`'s capabilities: all of them, the exit gate only when it was built with one."""
    if module.gate is not None:
        return LOOPED_CAPABILITIES
    return dataclasses.replace(LOOPED_CAPABILITIES, exit_gate=False)


def _names(fn: Any, name: str) -> bool:
    """Whether callable `fn` names the parameter `name` (a **kwargs catch-all does not count: a key the
    forward silently drops would make a random family look row-keyed)."""
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def capabilities(module: nn.Module, factory: Any = None) -> Capabilities:
    """The optional capabilities `module` (built by `factory`) has, found by name and signature."""
    if isinstance(module, LoopedLM):
        return looped_capabilities(module)
    if isinstance(module, FamilyLM):  # a family's module as the jobs hold it: what it was built with
        return module.caps
    has = lambda name: callable(getattr(module, name, None))  # noqa: E731
    fwd = module.forward
    return Capabilities(
        sample_loops=has("sample_loops"),
        row_key=_names(fwd, "row_key"),
        round_states=has("round_states") and _names(module.round_states, "skip_round"),
        readout=all(has(n) for n in ("readout", "run_rounds", "rope")),
        exit_gate=has("exit_gate"),
        kv_cache=all(has(n) for n in ("setup_cache", "prefill", "decode_step")),
        kv_exits=all(has(n) for n in ("kv_strategies", "step_context", "setup_cache", "run_rounds")),
        flops_per_token=has("flops_per_token"),
        param_groups=has("param_groups"),
        param_split=has("param_split"),
        validate_config=callable(getattr(factory, "validate_config", None)),
    )


def family_config(family: Family, config: dict[str, Any]) -> None:
    """Run the family's own config validation (if it has one), errors naming the family."""
    validate = getattr(family.factory, "validate_config", None)
    if validate is None:
        return
    try:
        validate(dict(config))
    except Exception as e:
        raise FamilyError(f"family {family.name!r}: family_config: {e}") from None


def instantiate(family: Family, config: dict[str, Any]) -> nn.Module:
    """factory(config), checked to be a torch module; FamilyError naming the family otherwise."""
    family_config(family, config)
    try:
        module = family.factory(dict(config))
    except Exception as e:
        raise FamilyError(
            f"family {family.name!r}: the factory raised {type(e).__name__}: {e} (config {config!r})"
        ) from None
    if not isinstance(module, nn.Module):
        raise FamilyError(
            f"family {family.name!r}: the factory returned {type(module).__name__}; expected a "
            "torch.nn.Module"
        )
    return module


# Above this many parameters (counted on the meta device) a family with `check_config` is checked at
# its small configuration: 50 M fp32 parameters are 200 MB, twice with the check's randomised copy.
CHECK_MAX_PARAMS = 50_000_000


def meta_module(family: Family, config: dict[str, Any]) -> nn.Module:
    """factory(config) on the meta device: every parameter a shape without storage."""
    with torch.device("meta"):
        return instantiate(family, config)


def n_params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def large_module(family: Family, config: dict[str, Any]) -> nn.Module | None:
    """The meta module of `config` when the conformance check should run at the family's
    `check_config` instead (model/family_pricing.py says why), else None."""
    small = getattr(family.factory, "check_config", None)
    if small is None:
        return None
    module = meta_module(family, config)
    if n_params(module) <= CHECK_MAX_PARAMS or not capabilities(module, family.factory).flops_per_token:
        return None
    return module


def check_config(family: Family, config: dict[str, Any]) -> dict[str, Any]:
    """The family's small configuration of the same code for `config` (its `factory.check_config`)."""
    try:
        small = dict(family.factory.check_config(dict(config)))
    except Exception as e:
        raise FamilyError(
            f"family {family.name!r}: factory.check_config raised {type(e).__name__}: {e}"
        ) from None
    if small.get("vocab_size") != config.get("vocab_size"):
        raise FamilyError(
            f"family {family.name!r}: factory.check_config changed vocab_size "
            f"{config.get('vocab_size')!r} -> {small.get('vocab_size')!r}; expected the same vocabulary"
        )
    return small


def own_kv_strategies(module: nn.Module) -> tuple[str, ...]:
    """A family's own KV strategy names (the contract's `kv_strategies()`, the first the cache as
    trained) when it can run exits through them (`step_context`); () otherwise, looplab's `LoopedLM`
    included (its strategies are `model.exit_names.KVStrategy`, run by `model.exits` itself)."""
    inner = getattr(module, "inner", module)  # a FamilyLM holds the family's module
    if not all(callable(getattr(inner, n, None)) for n in ("kv_strategies", "step_context")):
        return ()
    return tuple(str(n) for n in inner.kv_strategies())


def logits_of(out: Any) -> Any:
    """The logits of a forward's result: the tensor itself, or its `.logits`."""
    return getattr(out, "logits", out)


@dataclass(frozen=True)
class FamilyReport:
    """What `check_family` found: the family, its capabilities and the fallbacks looplab will use, and
    whether its forward draws randomness it cannot key per row (`split_dependent`)."""

    family: str
    package: str | None
    version: str | None
    capabilities: Capabilities
    split_dependent: bool
    vocab_size: int
    n_params: int = 0
    flops_per_token: float | None = None  # training FLOPs per token at the asked loops, when asked
    flops_measured: bool = False
    kv_strategies: tuple[str, ...] = ()  # the family's own, with kv_exits (the first: as trained)
    checked_config: dict[str, Any] | None = None  # where the forward was checked, if not the config's

    def fallbacks(self) -> dict[str, str]:
        return self.capabilities.fallbacks()


def randomise_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Every parameter drawn afresh (in place) at a scale that keeps activations of order 1: matrices
    normal with std 1/sqrt(fan-in), everything else 1 + normal(0, 0.1) so norms and gates stay on."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * p.shape[-1] ** -0.5)
            else:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
    return module


def _forward_logits(family: str, module: nn.Module, idx: Tensor, loops: int, vocab: int) -> Tensor:
    """The checked logits of `module(idx, loops=loops)`: (B, T, vocab) and floating, else FamilyError."""
    try:
        out = module(idx, loops=loops)
    except Exception as e:
        raise FamilyError(
            f"family {family!r}: forward(idx, loops={loops}) raised {type(e).__name__}: {e}; expected "
            "logits (B, T, V) for token ids idx (B, T) and an int loop count"
        ) from None
    logits = logits_of(out)
    B, T = idx.shape
    if not isinstance(logits, Tensor) or tuple(logits.shape) != (B, T, vocab):
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise FamilyError(
            f"family {family!r}: forward returned logits {got}; expected a tensor of shape (B, T, V) = "
            f"{(B, T, vocab)} (or an object with .logits)"
        )
    if not logits.dtype.is_floating_point:
        raise FamilyError(
            f"family {family!r}: forward returned logits of dtype {logits.dtype}; expected float"
        )
    return logits


def split_dependent(module: nn.Module, caps: Capabilities, vocab: int) -> bool:
    """Whether `module`'s training forward draws randomness it cannot key per row (see `_split_dependent`),
    probed at the smallest shapes on the module's device."""
    device = next(module.parameters()).device
    idx = torch.randint(0, vocab, (CHECK_BATCH, CHECK_LEN), generator=torch.Generator().manual_seed(0))
    return _split_dependent(module, caps, idx.to(device))


def _split_dependent(module: nn.Module, caps: Capabilities, idx: Tensor) -> bool:
    """Whether a training forward draws from the global generator without a per-row key: two forwards
    in train mode under different global seeds give different logits."""
    if caps.row_key:
        return False
    was = module.training
    module.train()
    outs = []
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        for seed in (1, 2):
            torch.manual_seed(seed)
            outs.append(logits_of(module(idx, loops=1)).float())
    module.train(was)
    return not torch.equal(outs[0], outs[1])


def check_family(family: str | None, config: dict[str, Any], loops: int | None = None) -> FamilyReport:
    """The conformance check: build the family from `config` (which must hold `vocab_size`) and run it
    on the CPU at the smallest shapes, refusing it with FamilyError (naming the family and what was
    expected) when it breaks the contract. Returns what it found; with `loops`, also the training FLOPs
    per token at that loop count and `config["seq_len"]` (the family's own, else measured)."""
    fam = resolve_family(family)
    vocab = config.get("vocab_size")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 2:
        raise FamilyError(f"family {fam.name!r}: config vocab_size: expected an int >= 2; got {vocab!r}")
    large = large_module(fam, config)  # a published size: values checked at the family's check_config
    checked = None if large is None else check_config(fam, config)
    module = instantiate(fam, config if checked is None else checked).cpu()
    if not _names(module.forward, "loops"):
        raise FamilyError(
            f"family {fam.name!r}: forward{inspect.signature(module.forward)} takes no `loops`; expected "
            "forward(idx, loops=n) with an int loop count"
        )
    caps = capabilities(module, fam.factory)
    idx = torch.randint(0, vocab, (CHECK_BATCH, CHECK_LEN), generator=torch.Generator().manual_seed(0))
    module.eval()
    with torch.no_grad():
        _forward_logits(fam.name, module, idx, 1, vocab)
        probe = randomise_(copy.deepcopy(module))
        one, two = (_forward_logits(fam.name, probe, idx, n, vocab) for n in (1, 2))
    if torch.allclose(one, two):
        raise FamilyError(
            f"family {fam.name!r}: forward gives the same logits at loops=1 and loops=2 (with every "
            "parameter randomised); expected the loop count to change the computation"
        )
    split = _split_dependent(module, caps, idx)
    module = module if large is None else large  # counts at the asked size (the meta module)
    n_params = sum(p.numel() for p in module.parameters())
    flops, measured = None, False
    if loops is not None and caps.flops_per_token:
        flops = float(module.flops_per_token(loops))
    elif loops is not None:
        flops = measure_flops_per_token(module, vocab, int(config.get("seq_len", CHECK_LEN)), loops)
        measured = True
    kv = own_kv_strategies(module)
    return FamilyReport(
        fam.name, fam.package, fam.version, caps, split, vocab, n_params, flops, measured, kv, checked
    )


def _cpu_attention_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    """The CPU fused attention kernel counted as its matmuls (FlopCounterMode registers the CUDA ones)."""
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query, key, value)


_CPU_ATTENTION = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_attention_flops}


def measure_flops_per_token(module: nn.Module, vocab: int, seq_len: int, loops: int) -> float:
    """Training FLOPs per token at `loops` (3 x the forward's: forward + backward), measured once with
    torch.utils.flop_counter.FlopCounterMode on one sequence of `seq_len` tokens, in eval mode with
    autograd on (its graph is dropped). The counter sees matmuls and the scaled-dot-product attention
    kernels it registers (counted as their matmuls)."""
    from torch.utils.flop_counter import FlopCounterMode

    p = next(module.parameters(), None)
    device = p.device if p is not None else torch.device("cpu")
    idx = torch.zeros((1, seq_len), dtype=torch.long, device=device)
    was = module.training
    module.eval()
    counter = FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION)
    # with autograd on, as in training: a module's inference fast path (nn.TransformerEncoderLayer's
    # fused kernel without grad) is one op the counter cannot see, which would leave only the head
    try:
        with counter, torch.enable_grad():
            module(idx, loops=loops)
    finally:
        module.train(was)
    return 3.0 * counter.get_total_flops() / seq_len


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

    @staticmethod
    def _counts(loops, batch: int) -> list[int]:
        if isinstance(loops, int):
            return [loops] * batch
        return [int(c) for c in (loops.tolist() if isinstance(loops, Tensor) else loops)]

    def _logits(self, idx: Tensor, loops: int, key, rows: list[int] | None) -> Tensor:
        kwargs = {}
        if self.caps.row_key and hasattr(key, "rows"):
            kwargs["row_key"] = (
                key if rows is None else dataclasses.replace(key, rows=tuple(key.rows[r] for r in rows))
            )
        return logits_of(self.inner(idx, loops=loops, **kwargs)).float()

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

    # the readout at any round and the rounds with a keep mask (as model/looped.py's), for the exit rules
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
