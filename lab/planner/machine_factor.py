"""This machine's correction of the FLOP model, learnt from every finished job (`MachineFactors`).

The FLOP model (lab/planner/estimates.py) prices a job from its FLOPs and a short calibration of this
machine's FLOP/s. The calibration runs alone and briefly; jobs run beside others, load data, build
models, write files, so a whole kind of job lands at a steady multiple of its FLOP-model time (on the
2-core VM: train ~1.6x, depth sweeps ~2.4x, decode benches ~0.5x). A job of a variant already run is
priced from that variant's own runs (`measured`, `finished`); this module carries what the other
variants' runs say to a variant never run: for every finished job of this machine's device type, the
ratio of its actual time to what the FLOP model (with the current calibration) says it should have
taken, and per kind the median of those ratios, pooled over every recipe, size and setting.

Why one factor per kind, not a fit through FLOPs, attention and loop structure: the FLOP model already
carries the structure that differs between recipes (loop counts, windows, gradient-free rounds, decode
bytes per context and batch); what it misses is this machine's speed on that kind of work, which is a
property of the machine and the kind, not of the recipe. A calibration grid is a handful of jobs of one
recipe: enough to pin one number per kind, far too few to fit several coefficients that would not
be told apart (recipes of one size share most of their FLOP terms). A median is robust to the one
job that ran beside a heavy neighbour. A kind with no finished job of its own takes the factor
pooled over every kind's ratios (the machine's general slowness), said so in the plan.

The ratio of a train job is its measured throughput against the FLOP model's (training alone: the
start-up is already measured from history); of a job of forward passes, its wall time against the FLOP
model's work time (no start-up: such jobs start in a worker process others left idle, see
`TimeModel.forward_job`). Only the most recent `RECENT` finished jobs of each kind count, so a machine
that changed (a new calibration, another load) is followed and a large history costs little to read.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

# the most recent finished jobs per kind whose ratios make the factor
RECENT = 50


@dataclass(frozen=True)
class Factor:
    """Actual over FLOP-model time of finished jobs: their median (`value`), half their interquartile
    range (`spread`, 0 for fewer than 2), how many (`jobs`), and whether they are of the kind priced
    (`own`) or pooled over every kind (a kind with none of its own)."""

    value: float
    spread: float
    jobs: int
    own: bool = True

    @classmethod
    def of(cls, ratios: Iterable[float], own: bool = True) -> Factor | None:
        kept = sorted(r for r in ratios if math.isfinite(r) and r > 0)
        if not kept:
            return None
        spread = 0.0
        if len(kept) >= 2:
            q1, _, q3 = statistics.quantiles(kept, n=4, method="inclusive")
            spread = (q3 - q1) / 2
        return cls(statistics.median(kept), spread, len(kept), own)

    def describe(self) -> str:
        """ "from 14 finished jobs on this machine, factor 1.58 ± 0.20" (the evidence `looplab plan` shows)."""
        jobs = f"{self.jobs} finished job{'s' if self.jobs != 1 else ''}"
        which = "" if self.own else " of other kinds"
        return f"from {jobs}{which} on this machine, factor {self.value:.2f} ± {self.spread:.2f}"


class MachineFactors:
    """Per kind, the ratios of its finished jobs (`ratios`: kind -> actual / FLOP-model time, oldest
    first); `get(kind)` is the factor the FLOP model's time of a job of that kind is multiplied by."""

    def __init__(self, ratios: dict[str, list[float]]) -> None:
        self.ratios = {kind: found[-RECENT:] for kind, found in ratios.items() if found}
        self._pooled = Factor.of((r for found in self.ratios.values() for r in found), own=False)

    def get(self, kind: str) -> Factor | None:
        """The kind's own factor, else the one pooled over every kind; None without any finished job."""
        own = Factor.of(self.ratios.get(kind, ()))
        return own if own is not None else self._pooled

    def lines(self, kinds: Iterable[str]) -> list[str]:
        """One line per kind of `kinds` that has a factor, for the plan's header."""
        out = []
        for kind in dict.fromkeys(kinds):
            factor = self.get(kind)
            if factor is not None:
                out.append(f"  {kind}: {factor.describe()}")
        if out:
            out.insert(
                0, "FLOP model x this machine's factor (actual / FLOP-model time, pooled over recipes):"
            )
        return out
