"""A forecast as the user sees it (`Forecast.text()` for `looplab plan`, `.frame()` for --csv and
pandas): every job with its estimate, start, end and device, its micro-batch and disk, the work per
device, GPU-hours in total and per kind, the disk the study keeps and needs at most, the finish time,
and what the scheduler will refuse or cannot fit in memory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from looplab.lab.planner.jobs import ForecastJob
from looplab.lab.planner.local_machine import Calibration
from looplab.orchestrator import jobkinds
from looplab.orchestrator.jobkinds import Pricing
from looplab.orchestrator.retention import fmt_bytes

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
    elsewhere: bool = False  # priced for another machine (the calibration's), the grids alone
    factors: list[str] = field(default_factory=list)  # the evidence of each `flop_fit` kind's factor

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

    def gpu_hours(self) -> dict[str, float]:
        """GPU-hours of the jobs still to run, per kind and `all` (each job's time x the GPUs it holds)."""
        out: dict[str, float] = {}
        for job in self.to_run():
            hours = (job.remaining_s or 0.0) * job.gpus * job.workers / 3600
            out[job.kind] = out.get(job.kind, 0.0) + hours
        out["all"] = sum(out.values())
        return out

    def disk(self) -> tuple[float, float]:
        """(bytes the jobs to run keep once all succeeded, the most their files take at any one time): as
        the simulation runs them, a running job at its peak and a finished one at what it keeps."""
        events: list[tuple[float, int, float]] = []
        kept = 0.0
        for job in self.to_run():
            disk = job.estimate.disk if job.estimate is not None else None
            if disk is None or job.start_s is None or job.end_s is None:
                continue
            kept += job.disk_kept or 0.0
            events += [(job.start_s, 1, disk.peak), (job.end_s, 0, (job.disk_kept or 0.0) - disk.peak)]
        most = now = 0.0
        for _, _, delta in sorted(events):  # at one time, ends (0) before starts (1)
            now += delta
            most = max(most, now)
        return kept, most

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
                    "factor": None if j.estimate.factor is None else j.estimate.factor.value,
                    "factor_jobs": None if j.estimate.factor is None else j.estimate.factor.jobs,
                    "flops": j.estimate.flops,
                    "peak_mem_mb": None
                    if j.estimate.peak_mem_bytes is None
                    else j.estimate.peak_mem_bytes / 2**20,
                    "fits": j.fits,
                    "micro_batch": j.estimate.micro_batch,
                    "micro_batch_given": j.estimate.micro_batch_given,
                    "disk_peak_bytes": None if j.estimate.disk is None else j.estimate.disk.peak,
                    "disk_kept_bytes": j.disk_kept,
                    "gpu_hours": None if j.remaining_s is None else j.remaining_s * j.gpus * j.workers / 3600,
                    "exclusive": j.exclusive,
                    "workers": j.workers,
                    "device": j.device,
                    "start_s": j.start_s,
                    "end_s": j.end_s,
                    "refused": j.refused,
                }
                for j in self.jobs
            ]
        )

    def text(self, wide: bool = False) -> str:
        """The plan as `looplab plan` prints it: a row per job, then the totals and the warnings. Within
        WIDTH columns (a terminal's, a pasted issue's): the narrow table leaves out disk, kept and start, a note that does not fit beside its row goes on the line below it, and long lines wrap;
        `wide` (`looplab plan --wide`) is every column on one line per job (`--csv`: every field)."""
        if not wide:
            return self._narrow()
        lines = [*self._lead(), HEADER]
        lines += [_row(j) for j in self.jobs]
        return "\n".join(lines + self._totals() + self._warnings())

    def _narrow(self) -> str:
        import textwrap

        lines = [
            wrapped for line in self._lead() for wrapped in textwrap.wrap(line, WIDTH, subsequent_indent="  ")
        ]
        lines.append(NARROW_HEADER)
        for j in self.jobs:
            row, note = _narrow_row(j), "; ".join(_notes(j))
            if note and len(row) + 2 + len(note) <= WIDTH:
                lines.append(f"{row}  {note}")
                continue
            lines.append(row)
            if note:
                lines += textwrap.wrap(note, WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 8)
        for line in self._totals() + self._warnings():
            lines += textwrap.wrap(line, WIDTH, subsequent_indent="  ") or [""]
        return "\n".join(lines)

    def _lead(self) -> list[str]:
        """What the table is priced for, before it."""
        lines = []
        if self.elsewhere and self.calibration is not None:
            lines.append(
                f"priced for {self.gpus:g} x {self.calibration.describe()}; the grids alone (this database's "
                "queue and history ran elsewhere)"
            )
        return lines + list(self.factors)

    def _totals(self) -> list[str]:
        """The work per device, GPU-hours per kind, the disk and the finish time."""
        from looplab.lab.display import fmt_eta

        totals = self.totals()
        per = ", ".join(f"{k} {fmt_eta(v) or '0s'}" for k, v in totals.items() if k != "all")
        queue = [j for j in self.jobs if j.job_id is not None and j.status != "present"]
        new = [j for j in self.jobs if j.status == "new"]
        lines = [
            f"{len(new)} new job(s) behind {len(queue)} queued/running; work: {fmt_eta(totals['all']) or '0s'}"
            f" ({per or 'nothing to run'}) on {self.cpus:g} CPU(s), {self.gpus:g} GPU(s)"
        ]
        if self.gpus > 0:
            hours = self.gpu_hours()
            kinds = ", ".join(f"{jobkinds.title(k)} {v:,.1f}" for k, v in hours.items() if k != "all")
            lines.append(f"GPU-hours: {hours['all']:,.1f}{f' ({kinds})' if kinds else ''}")
        kept, most = self.disk()
        if most > 0:
            lines.append(
                f"disk: {fmt_bytes(kept)} kept once every job succeeded (each job's retention), "
                f"{fmt_bytes(most)} at most at any one time while they run"
            )
        finish = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.finish_at))
        bound = " at the earliest" if any(j.remaining_s is None for j in self.to_run()) else ""
        start = (
            f", of which {self.driver_start_s:.0f} s to start the queue" if self.driver_start_s >= 0.5 else ""
        )
        lines.append(f"estimated finish: in {fmt_eta(self.makespan_s) or '0s'}{bound} ({finish}){start}")
        return lines

    def _warnings(self) -> list[str]:
        """What the reader must act on: a contended calibration, jobs without an estimate, refused or
        too big for their device."""
        lines = []
        cal = self.calibration
        if cal is not None and cal.contended:
            lines.append(
                f"warning: this machine's calibration was measured under load ({cal.load:.1f} per CPU): "
                "FLOP-model times are too long; run `looplab plan --recalibrate` on a quiet machine"
            )
        unknown = [j.key for j in self.to_run() if j.remaining_s is None]
        if unknown:
            lines.append(f"no estimate for {len(unknown)} job(s): {', '.join(unknown[:10])}")
        refused = [j.key for j in self.jobs if j.refused is not None]
        if refused:
            lines.append(f"the scheduler will refuse (too big for the cluster): {', '.join(refused)}")
        flagged = [j.key for j in self.jobs if j.fits is False]
        if flagged:
            lines.append(f"will not fit their device's memory: {', '.join(flagged)}")
        if any(_suggested(j) for j in self.jobs):
            lines.append(
                "* micro: the most sequences per forward that fit (micro_batch_size; the whole batch does not)"
            )
        return lines


HEADER = (
    f"{'job':>5} {'kind':<12} {'what':<30} {'status':<8} {'est.':>7} {'FLOPs':>8} "
    f"{'peak mem':>9} {'micro':>5} {'disk':>8} {'kept':>8} {'source':<10} {'device':<6} "
    f"{'start':>7} {'end':>7}  note"
)


WIDTH = 120
# the narrow table (`looplab plan`): 113 columns before the note
NARROW_HEADER = (
    f"{'job':>5} {'kind':<12} {'what':<26} {'status':<8} {'est.':>7} {'FLOPs':>8} "
    f"{'peak mem':>9} {'micro':>5} {'source':<10} {'device':<6} {'end':>7}  note"
)


def _suggested(j: ForecastJob) -> bool:
    """Its whole batch does not fit the device, but the micro-batch shown (the most that fits) would."""
    e = j.estimate
    return j.fits is False and not e.micro_batch_given and e.micro_batch is not None


def _row(j: ForecastJob) -> str:
    """One job's line of the table (HEADER's columns)."""
    e = j.estimate
    mem = "" if e.peak_mem_bytes is None else fmt_bytes(e.peak_mem_bytes)
    micro = "" if e.micro_batch is None else f"{e.micro_batch}{'*' if _suggested(j) else ''}"
    disk, kept = ("", "") if e.disk is None else (fmt_bytes(e.disk.peak), fmt_bytes(j.disk_kept or 0))
    flops = "" if e.flops is None else format(e.flops, ".2e")
    return (
        f"{j.key:>5} {j.kind:<12} {j.what[:30]:<30} {j.status:<8} {_dur(e.seconds):>7} "
        f"{flops:>8} {mem:>9} {micro:>5} {disk:>8} {kept:>8} "
        f"{e.source:<10} {j.device:<6} {_dur(j.start_s):>7} {_dur(j.end_s):>7}  {'; '.join(_notes(j))}"
    )


def _narrow_row(j: ForecastJob) -> str:
    """One job's line of the narrow table (NARROW_HEADER's columns, the note left to the caller); a
    `what` longer than its column is cut with "…"."""
    e = j.estimate
    mem = "" if e.peak_mem_bytes is None else fmt_bytes(e.peak_mem_bytes)
    micro = "" if e.micro_batch is None else f"{e.micro_batch}{'*' if _suggested(j) else ''}"
    flops = "" if e.flops is None else format(e.flops, ".2e")
    what = j.what if len(j.what) <= 26 else j.what[:25] + "…"
    return (
        f"{j.key:>5} {j.kind[:12]:<12} {what:<26} {j.status:<8} {_dur(e.seconds):>7} "
        f"{flops:>8} {mem:>9} {micro:>5} {e.source[:10]:<10} {j.device[:6]:<6} {_dur(j.end_s):>7}"
    )


def _notes(j: ForecastJob) -> list[str]:
    """A job's note column: refused, its workers, whether and how it fits its device, alone, present."""
    e = j.estimate
    note = []
    if j.refused is not None:
        note.append(f"REFUSED: {j.refused}")
    if j.workers > 1:
        note.append(f"{j.workers} workers")
    if j.fits is False:
        note.append(f"WILL NOT FIT ({fmt_bytes(j.device_memory or 0)} on the device)")
        if _suggested(j):
            note.append(f"micro_batch_size {e.micro_batch} would fit")
        elif (
            e.micro_batch is None
            and not e.micro_batch_given
            and jobkinds.declared(j.kind).pricing == Pricing.TRAINING
        ):
            note.append("not even one sequence per forward fits")  # a micro-batch was looked for: none fits
    if j.exclusive:
        note.append("exclusive")
    if j.preempted_s:
        note.append("preempted at " + ", ".join(_dur(t) for t in j.preempted_s))
    if j.status == "present":
        note.append("already in the database: not added again")
    return note


def _dur(seconds: float | None) -> str:
    from looplab.lab.display import fmt_eta

    if seconds is None:
        return "?"
    return fmt_eta(seconds) if seconds >= 1 else f"{seconds:.1f}s"
