"""A forecast as the user sees it (`Forecast.text()` for `looplab plan`, `.frame()` for --csv and
pandas): every job with its estimate, start, end and device, the work per device, the finish time, and
what the scheduler will refuse or cannot fit in memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.planner.calibration import Calibration
from orchestrator.planner.jobs import ForecastJob

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Forecast:
    """Every job with its estimate, start and end; totals per device and overall; the finish time."""

    jobs: list[ForecastJob]
    cpus: float
    gpus: float
    makespan_s: float
    now: float
    calibration: Calibration | None = None
    driver_start_s: float = 0.0  # included in makespan_s: the queue's start-up before the first job

    @property
    def finish_at(self) -> float:
        return self.now + self.makespan_s

    def new_jobs(self) -> list[ForecastJob]:
        return [j for j in self.jobs if j.status in ("new", "present")]

    def to_run(self) -> list[ForecastJob]:
        """The jobs that will run: not already in the database as finished, not refused."""
        return [j for j in self.jobs if j.status != "present" and j.refused is None]

    def totals(self) -> dict[str, float]:
        """Busy seconds per device (cpu, gpu0, ...: a job of several devices counts on each) of the jobs
        still to run, and `all`."""
        out: dict[str, float] = {}
        for job in self.to_run():
            if job.remaining_s is None:
                continue
            for device in (job.device or "cpu").split(","):
                out[device] = out.get(device, 0.0) + job.remaining_s
        out["all"] = sum(j.remaining_s or 0.0 for j in self.to_run())
        return out

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "job": j.key,
                    "job_id": j.job_id,
                    "kind": j.kind,
                    "what": j.what,
                    "status": j.status,
                    "seconds": j.estimate.seconds,
                    "source": j.estimate.source,
                    "flops": j.estimate.flops,
                    "peak_mem_mb": None
                    if j.estimate.peak_mem_bytes is None
                    else j.estimate.peak_mem_bytes / 2**20,
                    "fits": j.fits,
                    "exclusive": j.exclusive,
                    "workers": j.workers,
                    "device": j.device,
                    "start_s": j.start_s,
                    "end_s": j.end_s,
                    "refused": j.refused,
                }  # fmt: skip
                for j in self.jobs
            ]
        )

    def text(self) -> str:
        from orchestrator.display import fmt_eta

        lines = [f"{'job':>5} {'kind':<12} {'what':<30} {'status':<8} {'est.':>7} {'FLOPs':>8} "
                 f"{'peak mem':>9} {'source':<10} {'device':<6} {'start':>7} {'end':>7}  note"]  # fmt: skip
        for j in self.jobs:
            e = j.estimate
            mem = "" if e.peak_mem_bytes is None else _bytes(e.peak_mem_bytes)
            note = []
            if j.refused is not None:
                note.append(f"REFUSED: {j.refused}")
            if j.workers > 1:
                note.append(f"{j.workers} workers")
            if j.fits is False:
                note.append(f"WILL NOT FIT ({_bytes(j.device_memory or 0)} on the device)")
            if j.exclusive:
                note.append("exclusive")
            if j.status == "present":
                note.append("already in the database: not added again")
            lines.append(
                f"{j.key:>5} {j.kind:<12} {j.what[:30]:<30} {j.status:<8} {_dur(e.seconds):>7} "
                f"{'' if e.flops is None else format(e.flops, '.2e'):>8} {mem:>9} {e.source:<10} "
                f"{j.device:<6} {_dur(j.start_s):>7} {_dur(j.end_s):>7}  {'; '.join(note)}"
            )
        totals = self.totals()
        per = ", ".join(f"{k} {fmt_eta(v) or '0s'}" for k, v in totals.items() if k != "all")
        queue = [j for j in self.jobs if j.job_id is not None and j.status != "present"]
        new = [j for j in self.jobs if j.status == "new"]
        unknown = [j for j in self.to_run() if j.remaining_s is None]
        lines.append(
            f"{len(new)} new job(s) behind {len(queue)} queued/running; work: {fmt_eta(totals['all']) or '0s'}"
            f" ({per or 'nothing to run'}) on {self.cpus:g} CPU(s), {self.gpus:g} GPU(s)"
        )
        finish = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.finish_at))
        bound = " at the earliest" if unknown else ""
        start = (
            f", of which {self.driver_start_s:.0f} s to start the queue" if self.driver_start_s >= 0.5 else ""
        )
        lines.append(f"estimated finish: in {fmt_eta(self.makespan_s) or '0s'}{bound} ({finish}){start}")
        cal = self.calibration
        if cal is not None and cal.contended:
            lines.append(
                f"warning: this machine's calibration was measured under load ({cal.load:.1f} per CPU): "
                "FLOP-model times are too long; run `looplab plan --recalibrate` on a quiet machine"
            )
        if unknown:
            lines.append(f"no estimate for {len(unknown)} job(s): {', '.join(j.key for j in unknown[:10])}")
        refused = [j.key for j in self.jobs if j.refused is not None]
        if refused:
            lines.append(f"the scheduler will refuse (too big for the cluster): {', '.join(refused)}")
        flagged = [j.key for j in self.jobs if j.fits is False]
        if flagged:
            lines.append(f"will not fit their device's memory: {', '.join(flagged)}")
        return "\n".join(lines)


def _dur(seconds: float | None) -> str:
    from orchestrator.display import fmt_eta

    if seconds is None:
        return "?"
    return fmt_eta(seconds) if seconds >= 1 else f"{seconds:.1f}s"


def _bytes(n: float) -> str:
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
