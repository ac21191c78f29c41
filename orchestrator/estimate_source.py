"""Where a job's planned wall time came from: the only place the names are spelled.

The planner (lab/planner/estimates.py) gives every estimate one; the queue stores it with a new job, beside
the planned seconds (`jobs.planned_source`), and the planned-against-actual frame and the dashboard's Plan
page group by it. A `StrEnum`: stored as its plain value, so rows written before the enum existed read
back equal to its members. Here, torch-free and below the lab, so the queue's readers can name it too.
"""

from __future__ import annotations

from enum import StrEnum


class EstimateSource(StrEnum):
    """How an estimate was made (lab/planner/estimates.py says each in full)."""

    MEASURED = "measured"  # the throughput of finished runs of the same variant, batch, device, workers
    FLOP_MODEL = "flop_model"  # the job's FLOPs over this machine's calibrated rates
    # the FLOP model's time x this machine's factor for the kind, learnt from finished jobs of any recipe
    FLOP_FIT = "flop_fit"
    FINISHED = "finished"  # finished jobs of the same kind and variant, scaled by FLOPs (or their median)
    BUDGET = "budget"  # a time budget whose throughput is unknown: the budget plus start-up
    UNKNOWN = "unknown"  # nothing to go on
