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
    training_loss(idx, targets, loops=n) -> .loss    else the cross-entropy of the forward's logits
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

The contract is this package: `resolution` (finding a family), `capabilities` (what it offers),
`conformance` (the check), `flops` (measuring what a forward costs) and `adapter` (the module as
the jobs hold it). Every name is re-exported here, so callers import from `looplab.model.contract`.
"""

from looplab.model.contract.adapter import (
    Built,
    FamilyFacts,
    FamilyFlops,
    FamilyLM,
    build_model,
    family_facts,
    family_flops,
    family_settings,
    forward_flops_per_token,
    gate_reading,
    param_counts,
)
from looplab.model.contract.capabilities import (
    LOOPED_CAPABILITIES,
    Capabilities,
    _names,
    capabilities,
    logits_of,
    looped_capabilities,
    own_kv_strategies,
)
from looplab.model.contract.conformance import (
    CHECK_BATCH,
    CHECK_LEN,
    CHECK_MAX_PARAMS,
    FamilyReport,
    _forward_logits,
    _split_dependent,
    check_config,
    check_context,
    check_family,
    large_module,
    meta_module,
    n_params,
    randomise_,
    split_dependent,
)
from looplab.model.contract.flops import (
    _CPU_ATTENTION,
    _cpu_attention_flops,
    measure_activation_bytes,
    measure_flops_per_token,
)
from looplab.model.contract.resolution import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    EXPECTED_NAME,
    PROVIDED_KEYS,
    Family,
    FamilyError,
    _looped_factory,
    _package_version,
    _safe,
    family_config,
    instantiate,
    resolve_family,
)

__all__ = [
    "BUILTIN",
    "Built",
    "CHECK_BATCH",
    "CHECK_LEN",
    "CHECK_MAX_PARAMS",
    "Capabilities",
    "ENTRY_POINT_GROUP",
    "EXPECTED_NAME",
    "Family",
    "FamilyError",
    "FamilyFacts",
    "FamilyFlops",
    "FamilyLM",
    "FamilyReport",
    "LOOPED_CAPABILITIES",
    "PROVIDED_KEYS",
    "_CPU_ATTENTION",
    "_cpu_attention_flops",
    "_forward_logits",
    "_looped_factory",
    "_names",
    "_package_version",
    "_safe",
    "_split_dependent",
    "build_model",
    "capabilities",
    "check_config",
    "check_context",
    "check_family",
    "family_config",
    "family_facts",
    "family_flops",
    "family_settings",
    "forward_flops_per_token",
    "gate_reading",
    "instantiate",
    "large_module",
    "logits_of",
    "looped_capabilities",
    "measure_activation_bytes",
    "measure_flops_per_token",
    "meta_module",
    "n_params",
    "own_kv_strategies",
    "param_counts",
    "randomise_",
    "resolve_family",
    "split_dependent",
]
