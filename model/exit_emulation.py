"""Per-token exits emulated from separate forwards, for a model family without the exit capabilities.

`model.exits` runs the rule inside one forward: it reads the next-token distribution out of every
round's state (the contract's readout at any round) and masks stopped tokens (the rounds with a `keep`
mask). A family that offers neither still gets the rules: the model is run R times, at loops 1..R, and
after forward t each token's rule is decided from the logits of forwards t-1 and t (kl, entropy,
argmax), or from the states of `round_states(idx, R)` (state), exactly as `model.exits.ExitTracker`
decides it from a readout; a token that stops after round t takes forward t's logits.

This is not the same function as the native exit forward: forward t is dense, so a later token reads a
stopped token's round-t keys and values rather than held ones, and every token's readout at t is that
of a full forward at t. At fixed depth (no rule, every token at R) it is exactly the forward at R. Rows
of an adaptive job that used it are labelled emulated (`model.exit_names.EMULATED`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from looplab.model.contract import capabilities, logits_of
from looplab.model.exit_names import ExitRuleName
from looplab.model.exits import ExitOutput, ExitRule, ExitTracker


def exit_natively(model: Any) -> bool:
    """Whether `model` (as the jobs hold it) offers what `model.exits` runs the rules on: the contract's
    readout capability, `readout(h, idx, ctx)` after any round, `run_rounds(...)` with a `keep` mask and
    `rope(T)` (as `families.looped.model.LoopedLM`)."""
    return capabilities(model).readout


def rule_needs(rule: ExitRule | None) -> str | None:
    """The capability an emulated rule needs beyond the forward: `round_states` for the state rule."""
    return "round_states" if rule is not None and rule.rule is ExitRuleName.STATE else None


@torch.no_grad()
def emulated_exit_forward(model, idx: Tensor, rule=None, *, h0_seed, exits=None, max_rounds=None, stop=False):
    """`model.exits.exit_forward`'s result (an `ExitOutput`, the same arguments) for idx (B, T) from
    forwards `model(idx, loops=t, h0_seed=...)` at t = 1..R: each token's exit round by `rule` (an
    `ExitRule`, or the given `exits` (B, T) in 1..R) and the logits of the forward at that round.
    `stop`: no forward after every token has stopped."""
    R = rule.max_rounds if max_rounds is None and rule is not None else max_rounds
    if rule is not None and rule.max_rounds != R:
        raise ValueError(f"exit.max_rounds {rule.max_rounds} != the forward's {R} rounds")
    tracker = ExitTracker(rule, exits, R, tuple(idx.shape), idx.device, readout=lambda logits: logits)
    states = model.round_states(idx, R, h0_seed=h0_seed) if rule_needs(rule) else None
    tracker.observe(None if states is None else states[0])  # the initial state: never compared
    out: Tensor | None = None
    last = int(tracker.exit_round.max()) if exits is not None and exits.numel() else R
    for t in range(1, R + 1):
        logits = logits_of(model(idx, loops=t, h0_seed=h0_seed)).float()
        tracker.observe(logits if states is None else states[t])
        tracker.rounds_run = t
        # exit_round is t only for a token that stopped after round t (or was given t), R for the rest
        here = (tracker.exit_round == t)[..., None]
        out = torch.where(here, logits, torch.zeros_like(logits) if out is None else out)
        if stop and (t >= last if rule is None else not bool(tracker.running.any())):
            break
    assert out is not None
    return ExitOutput(out, tracker.exit_round, tracker.rounds_run)
