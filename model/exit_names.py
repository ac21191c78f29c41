"""The names of adaptive compute, spelled once: exit rules, KV strategies, the fixed-depth pseudo-rule
and the key of one cell of the adaptive grid.

Pure Python (no torch), so the analysis and the dashboard read these names without importing torch;
`model.exits` and `model.kv_cache` say what each name does. Both enums are `StrEnum`s: a member is its
plain value ("kl", "last_m"), which is what grid files hold and what the database stores, so a value
read back compares equal to its member.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ExitRuleName(StrEnum):
    """The criteria by which a token stops looping (`model.exits`)."""

    STATE = "state"
    KL = "kl"
    ENTROPY = "entropy"
    ARGMAX = "argmax"
    GATE = "gate"  # a learned exit: the trained gate's cumulative exit mass reaches q (model.exit_gate)

    @property
    def reads_out(self) -> bool:
        """Whether the rule reads the next-token distribution out (coda and head) every round."""
        return self not in (ExitRuleName.STATE, ExitRuleName.GATE)


# The rules any model can run (post hoc: no trained part); `gate` needs a model trained with an exit gate.
POST_HOC_RULES = tuple(r for r in ExitRuleName if r is not ExitRuleName.GATE)


class KVStrategy(StrEnum):
    """What keys and values later rounds read for a token that stopped (`model.kv_cache`)."""

    PER_ROUND = "per_round"
    LATEST = "latest"
    FIRST = "first"
    LAST_M = "last_m"

    @property
    def changes_function(self) -> bool:
        """Whether the strategy differs from the trained model even without exits (rounds read round 1's)."""
        return self in (KVStrategy.FIRST, KVStrategy.LAST_M)


# The objectives that train a learned exit gate (`model.exit_gate`; "none": no gate).
GATE_OBJECTIVES = ("none", "entropy", "geometric", "act")

# The rule column of the fixed-depth cells: every token runs max_rounds rounds.
FIXED = "fixed"
# The rule column of a routed family's own cell: each token runs the recursions its router gives it
# (the family's `token_depths(idx, loops)`, as Mixture-of-Recursions; workers/adaptive/routed.py).
ROUTER = "router"
CELL_SEPARATOR = " | "
# Ends the strategy part of a cell's `config` when its exits were emulated from separate forwards (a
# family without the readout at any round: model/exit_emulation.py), e.g. `kl<0.01 | per_round (emulated)`.
EMULATED = " (emulated)"


def strategy_label(strategy: str, m: int | None) -> str:
    """The strategy as a cell names it: `last_m2` for last_m with m = 2, else the strategy itself."""
    return f"{KVStrategy.LAST_M}{m}" if strategy == KVStrategy.LAST_M else str(strategy)


@dataclass(frozen=True)
class CellKey:
    """One cell of the adaptive grid by name: the rule's label (`kl<0.01`, `argmax>=2`, or FIXED) and the
    strategy's label (`per_round`, `last_m2`). `label()` is the `config` column of the adaptive tables,
    e.g. `kl<0.01 | per_round`; `parse` reads it back."""

    rule: str
    strategy: str

    def label(self) -> str:
        return f"{self.rule}{CELL_SEPARATOR}{self.strategy}"

    @classmethod
    def parse(cls, text: str) -> CellKey:
        rule, sep, strategy = text.rpartition(CELL_SEPARATOR)
        if not sep or not rule or not strategy:
            raise ValueError(f"config: expected 'rule{CELL_SEPARATOR}kv strategy', got {text!r}")
        return cls(rule, strategy)

    @property
    def is_fixed(self) -> bool:
        """Whether the cell is the fixed depth (no exit rule)."""
        return self.rule == FIXED

    @property
    def emulated(self) -> bool:
        """Whether the cell's exits were emulated from separate forwards (`EMULATED`)."""
        return self.strategy.endswith(EMULATED)

    @property
    def strategy_label(self) -> str:
        """The KV strategy's label (`per_round`, `last_m2`) without the emulated mark."""
        return self.strategy.removesuffix(EMULATED)
