"""The adaptive job on a model of another family (model/contract/): what it refuses and what it counts.

looplab's own model runs the exit rules inside one forward (`model.exits`: the contract's readout at
any round and the rounds with a keep mask), with KV strategies across rounds in its KV cache and decode
timing with exits. A family runs them inside one forward too when it has the readout capability (as
`families/looped/model.py`), else they are emulated from R separate forwards (`model.exit_emulation`). A family
with the contract's KV strategies with exits (`kv_strategies()`, `step_context(cache)`; Huginn's `full`
and `latest_per_slot`) also offers its own strategies as cells (`FamilyKV`): each is evaluated token by
token through its cache, the rule decided inside every step (`model.exits.family_exit_forward`). So
- at submission (`refuse_family`, which the adaptive job's `refuse_follow`, the grid's follow-up hook,
  calls for a follow-up of such a run) and again when the job starts (`emulated_exits`), a spec is
  refused by field when it asks a family for KV strategies other than per_round and its own, or for
  decode timing (looplab's own KV cache's), or for the state rule when its exits are emulated and it
  has no `round_states`, or for the `gate` rule when it has no `exit_gate` or its exits are emulated;
- its FLOPs (`family_cost`, native or emulated) are the family's own forward FLOPs per token at each
  loop count (the contract's `flops_per_token`, else measured): a token that stops after round r spends
  the forward at r. The rule's readouts are not counted (a family's readout has no FLOP count). The KV
  columns are the bytes the family's cache allocates under its own strategy (`family_kv_bytes`, its
  count checked against the cache's tensors); NULL under per_round, which has no cache.
"""

from __future__ import annotations

from typing import Any

from looplab.model.errors import ConfigError
from looplab.model.exit_names import POST_HOC_RULES, ExitRuleName, KVStrategy


def refuse_family(spec: dict[str, Any], facts: dict[str, Any]) -> None:
    """ConfigError naming the field when adaptive spec `spec` (a dict) asks a family with `facts` (its
    name, "family", "capabilities": {name: bool}, and "kv_strategies": its own strategy names) for what
    its exits cannot do."""
    family, capabilities = facts.get("family"), facts.get("capabilities") or {}
    emulated = not capabilities.get("readout")
    accepted = [KVStrategy.PER_ROUND.value, *(() if emulated else facts.get("kv_strategies") or ())]
    held = [str(s) for s in spec.get("kv_strategies") or () if s not in accepted]
    if held:
        raise ConfigError(
            f"kv_strategies: {', '.join(held)}: family {family!r} runs per_round (its parallel forward with "
            f"exits) and the strategies of its own KV cache (the contract's kv_strategies and step_context, "
            f"with the readout at any round); accepted: {accepted}"
        )
    if spec.get("decode_steps"):
        raise ConfigError(
            f"decode_steps: decoding with exits runs on looplab's own model's KV cache across rounds, not "
            f"family {family!r}'s; accepted: 0"
        )
    _refuse_gate(spec, family, capabilities, emulated)
    if emulated and ExitRuleName.STATE in (spec.get("rules") or {}) and not capabilities.get("round_states"):
        raise ConfigError(
            f"rules.state: family {family!r} has neither the readout at any round nor round_states, so no "
            f"state change to exit on; accepted rules: "
            f"{', '.join(r for r in ExitRuleName if r is not ExitRuleName.STATE)}"
        )


def _refuse_gate(spec: dict[str, Any], family, capabilities: dict[str, bool], emulated: bool) -> None:
    """The `gate` rule needs the contract's exit_gate, and the round's state it reads: the exits run
    natively (emulated forwards give only logits)."""
    if ExitRuleName.GATE not in (spec.get("rules") or {}):
        return
    accepted = ", ".join(r for r in POST_HOC_RULES if not (emulated and r is ExitRuleName.STATE))
    if not capabilities.get("exit_gate"):
        raise ConfigError(
            f"rules.gate: family {family!r} has no exit_gate (the contract's learned exit), so no gate to "
            f"exit on; accepted rules: {accepted}"
        )
    if emulated:
        raise ConfigError(
            f"rules.gate: family {family!r} has no readout at any round, so its exits are emulated from "
            f"separate forwards, which give the gate no round's state; accepted rules: {accepted}"
        )


def emulated_exits(model, spec: dict[str, Any], train_spec: dict[str, Any], R: int, reporter) -> bool:
    """Whether the exits of `model` are emulated (it lacks the contract's readout capability); a model of
    another family (`train_spec` names it) has the spec checked as at submission (`refuse_family`), and
    the log says when its exits are emulated."""
    from dataclasses import asdict

    from looplab.model.contract import capabilities
    from looplab.model.exit_emulation import exit_natively

    emulated = not exit_natively(model)
    family = train_spec.get("family")
    if family is None:
        return emulated
    facts = {"capabilities": asdict(capabilities(model)), "kv_strategies": list(family_strategies(model))}
    refuse_family(spec, {"family": family, **facts})
    if emulated:
        reporter.log(
            f"adaptive: family {family!r} has no readout at any round: exits emulated from {R} separate "
            "forwards (loops 1..R), rows labelled emulated"
        )
    return emulated


class FamilyKV(str):
    """A family's own KV strategy name as an adaptive cell's strategy (looplab's are
    `model.exit_names.KVStrategy`); its cells are decoded token by token through the family's cache
    (`model.exits.family_exit_forward`). `changes_function`: not the cache of the model as trained (the
    family's first strategy is)."""

    changes_function: bool

    def __new__(cls, name: str, changes_function: bool) -> FamilyKV:
        out = super().__new__(cls, name)
        out.changes_function = changes_function
        return out

    def __getnewargs__(self) -> tuple[str, bool]:  # pickled (Ray) with its flag
        return str(self), self.changes_function


def family_strategies(model) -> dict[str, FamilyKV]:
    """{name: FamilyKV} of a family's module (a `FamilyLM` or the family's own) with the contract's KV
    strategies with exits; empty without them."""
    from looplab.model.contract import own_kv_strategies

    return {n: FamilyKV(n, i > 0) for i, n in enumerate(own_kv_strategies(model))}


def family_kv_bytes(model, strategy: str, seq_len: int, R: int) -> int:
    """The bytes a one-sequence cache of `strategy` at R rounds allocates: the family's own count
    (`kv_cache_bytes(..., loops=, strategy=)`), checked against the bytes `setup_cache` really holds
    (`nbytes()`); a family whose two disagree is refused, since its KV column would mislead."""
    inner = getattr(model, "inner", model)
    counted = int(inner.kv_cache_bytes(1, seq_len, loops=R, strategy=strategy))
    held = int(inner.setup_cache(1, seq_len, loops=R, strategy=strategy).nbytes())
    if counted != held:
        raise RuntimeError(
            f"kv_strategy {strategy}: the cache holds {held} bytes, kv_cache_bytes says {counted}"
        )
    return counted


def family_forward_flops(model, cfg, R: int) -> dict[int, float]:
    """{loops n: forward FLOPs per token} of a family's model at n = 1..R (the contract's)."""
    from looplab.model.contract import forward_flops_per_token

    return {n: forward_flops_per_token(model, cfg.vocab_size, cfg.seq_len, n) for n in range(1, R + 1)}


def equivalent_loops(spent: float, flops_at: dict[int, float], R: int) -> float:
    """The loop count (a real number, linear between counts, from 0 FLOPs at 0 loops) at which the
    family's forward spends `spent` FLOPs per token; at most R."""
    n, below = 0, 0.0
    while n < R and spent > flops_at[n + 1]:
        n, below = n + 1, flops_at[n + 1]
    if n == R:
        return float(R)
    step = flops_at[n + 1] - below
    return n + ((spent - below) / step if step > 0 else 0.0)


def family_cost(
    rule, share: dict[int, float], flops_at: dict[int, float], R: int, kv_bytes: int | None = None
) -> dict[str, Any]:
    """An `adaptive_evals` row's cost columns for a family's exits by `rule` (None: the fixed depth R),
    with `share` {exit round: fraction of the tokens}, the family's forward FLOPs per loop count and,
    under one of its own KV strategies, the bytes its cache allocates (every slot is filled and read,
    so needed = allocated)."""
    spent = flops_at[R] if rule is None else sum(s * flops_at[r] for r, s in share.items())
    return {
        "equivalent_rounds": equivalent_loops(spent, flops_at, R),
        "forward_flops_per_token": spent,
        "rule_flops_per_token": None,
        "fixed_flops_per_token": flops_at[R],
        "kv_mib": None if kv_bytes is None else kv_bytes / 2**20,
        "kv_mib_needed": None if kv_bytes is None else kv_bytes / 2**20,
    }
