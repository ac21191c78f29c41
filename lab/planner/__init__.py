"""How long will this grid take? Per-job estimates of wall time, FLOPs and peak memory, and the queue's
finish time, before anything is submitted (`looplab plan`, `Queue.plan`, `looplab status`).

The parts, in the order a forecast uses them:
- calibration.py: what this machine achieves (measured by workers/calibrate.py once, cached per machine
  and device); another machine's comes from its calibration file or the device table
  (`workers.calibrate.read_file`, `for_device`, with `plan_grids(..., elsewhere=True)`);
- history.py: reads of finished jobs (the history estimates learn from; planned against actual);
- estimates.py: `TimeModel`, each job's seconds from its kind's cost model (FLOPs, memory, counts:
  the `cost()` its declaration names, `Kind.cost` in workers/jobs.py, defaults from its Spec) and the
  history or calibration, priced as the declaration's `Pricing` says, a train job's micro-batch that
  fits and its disk (orchestrator/retention.py); each estimate says its `EstimateSource`;
- jobs.py: the queue's jobs and the grids' plans as `ForecastJob`s, with what they ask;
- simulate.py: the scheduler's own admission rule (orchestrator/admission.py) replayed on the estimates;
- report.py: `Forecast`, the text and table a user reads;
- forecast.py: the entry points `plan_grids`, `forecast_queue`, `submission_estimates`.
Everything here reads the database and never writes it.
"""

from looplab.lab.planner.estimates import Estimate, TimeModel
from looplab.lab.planner.forecast import forecast_queue, plan_grids, submission_estimates
from looplab.lab.planner.jobs import ForecastJob, device_memory, local_slots
from looplab.lab.planner.local_machine import Calibration, cached_calibration, calibrate
from looplab.lab.planner.report import Forecast
from looplab.lab.planner.simulate import simulate
from looplab.orchestrator.estimate_source import EstimateSource
from looplab.orchestrator.frames import planned_vs_actual

__all__ = [
    "Calibration",
    "Estimate",
    "EstimateSource",
    "Forecast",
    "ForecastJob",
    "TimeModel",
    "cached_calibration",
    "calibrate",
    "device_memory",
    "forecast_queue",
    "local_slots",
    "plan_grids",
    "planned_vs_actual",
    "simulate",
    "submission_estimates",
]
