"""A sweep says what it makes: grid points that resolve to one run are refused (`refuse_same_runs`).

A job's identity is its spec without its execution fields (workers/identity.py): a micro-batch size,
bucketing, a device say how the same run executes, not what it is, so a grid resubmitted with other
execution values adds nothing. A sweep over such a field therefore makes one run of several points;
submitted, it would silently give fewer jobs than the user asked for ("1 grid(s), 1 job(s)" for
`sweep={"bucketing": [False, True]}`). It is refused instead, before anything is written, naming the axis
that does not change the run and how to compare execution settings (a benchmark times the same run
split differently; a field that defines the run makes another job). Refused rather than submitted once
with a warning: the user's intent (compare the settings) cannot be met by one job, and a warning printed
under a submission that already happened is easy to miss in a script's output.
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Any

from looplab.model.errors import ConfigError
from looplab.orchestrator import jobkinds

if TYPE_CHECKING:
    from looplab.workers.jobs import JobRegistry


def refuse_same_runs(
    grid_name: str,
    job: str,
    axes: list[tuple[dict[str, list[Any]], int]],
    points: list[tuple[dict[str, Any], Any]],
    kinds: JobRegistry,
) -> None:
    """Raise ConfigError when two points of grid `grid_name` (of kind `job`) have the same identity:
    the axes whose values differ between them, and whether each is an execution field of the kind.
    `points`: each point's canonical spec and what else defines its run (a match-time budget's
    reference, which is no part of the spec), in `Grid.configs()` order; `axes`: the sweep's as
    `_sweep_axes` gives them."""
    combos = list(itertools.product(*(range(length) for _, length in axes)))
    specs = [spec for spec, _ in points]
    keys = [
        json.dumps([k, other], sort_keys=True, default=str)
        for k, (_, other) in zip(_keys(job, specs, kinds), points, strict=True)
    ]
    first: dict[str, int] = {}
    for n, key in enumerate(keys):
        if key not in first:
            first[key] = n
            continue
        m = first[key]
        differ = [group for (group, _), a, b in zip(axes, combos[m], combos[n], strict=True) if a != b]
        dropped = set(specs[n]) - set(jobkinds.identity(job, specs[n], kinds))
        # the axes of the whole sweep that only set execution fields: each collapses the grid
        execution = [p for group, _ in axes if all(q.split(".")[0] in dropped for q in group) for p in group]
        paths = execution or [path for group in differ for path in group]
        why = (
            f"{' and '.join(paths)} {'is an execution field' if len(paths) == 1 else 'are execution fields'}"
            f" of {job}: how a run executes, not what it is, so no part of its identity"
            if execution
            else f"points {m} and {n} resolve to the same spec"
        )
        raise ConfigError(
            f"grid {grid_name!r}: sweep.{', sweep.'.join(paths)}: {'does' if len(paths) == 1 else 'do'} not "
            f"change the run ({why}); its "
            f"{len(specs)} points are {len(set(keys))} job(s). To compare execution settings, time the same "
            "run with each (benchmarks/, e.g. benchmarks/model_bench.py) or sweep a field that defines the "
            "run; to run with one setting, put it in the grid's base"
        )


def _keys(job: str, specs: list[dict[str, Any]], kinds: JobRegistry) -> list[str]:
    """Each point's identity (what its config hash is computed from, less its dependencies) as text."""
    return [json.dumps(jobkinds.identity(job, s, kinds), sort_keys=True, default=str) for s in specs]
