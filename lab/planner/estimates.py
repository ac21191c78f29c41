"""Per-job estimates of wall time, FLOPs and peak memory (`TimeModel.estimate`, `estimate_plans`).

A job's cost (FLOPs, memory, the counts a time needs) comes from its kind's cost model, which the kind's
declaration names (`Kind.cost` in workers/jobs.py: a module with the kind's Spec and its `cost`, e.g.
`workers.train.cost`, `workers.evaluate.depth_sweep`), with the defaults of the kind's Spec; this module turns it
into seconds the way the declaration's `Pricing` says, from this database's finished jobs
(lab/planner/history.py) or this machine's calibration (lab/planner/local_machine.py). It never names a
kind: what follows says "train job" for a kind priced as TRAINING (`workers.train.cost`), "depth sweep
and eval" for the ON_CHECKPOINT ones, "decode bench" for the FORWARD one. The `source` of each estimate
(`EstimateSource`, orchestrator/estimate_source.py):
- `measured`: train jobs. The median throughput (`train_results.tokens_per_s`) of finished runs of the
  same variant, batch size, compile flag, device type and worker count; their evaluation FLOP/s,
  seconds per checkpoint and start-up overhead (wall time less training, evaluation and checkpoints)
  give the rest. A run on N workers with no finished run of that count takes the one-worker runs'
  throughput times N x `DDP_EFFICIENCY`.
- `flop_model`: the job's FLOPs over the calibrated FLOP/s: a train step's parts with autograd at the
  training rate, its gradient-free rounds at the forward rate, plus the optimizer's step (on N workers:
  the step's throughput times N x `DDP_EFFICIENCY`); evaluations,
  sweeps and eval jobs at the forward rate of their width; decode steps at the training rate plus a
  fixed cost per layer application. Start-up: the median over finished train jobs, else the calibration's;
  none for a job of forward passes that starts only after others end (a follow-up, an exclusive job: it
  starts in a worker process they left idle).
- `flop_fit`: the FLOP model's time times this machine's factor for the kind: the median of actual over
  FLOP-model time of this device type's finished jobs of that kind, of any recipe (of every kind when
  the kind has none); lab/planner/machine_factor.py says why one factor per kind. The FLOP model alone
  (`flop_model`) only when no job has finished on this device type.
- `finished`: depth sweeps, evals and decode benches. Finished jobs of the same kind and variant (the
  variant of the model they are about; decode benches, whose cost model is `per_device`: and device
  type), their wall time scaled by the ratio of FLOP-model times (with a calibration: a decode bench's
  per cell, bytes and fixed cost per layer included; else the ratio of FLOPs); a kind without a cost model takes the median wall
  time of its finished jobs.
- `budget`: a time budget (or `match_time_of`) whose throughput is unknown: the budget plus start-up.
- `unknown`: nothing to go on (a plugin's kind never run before, a harness eval, no calibration).
Decode steps by the FLOP model: each cell's steps at the larger of their FLOPs over the rate and the bytes
they read (weights of every layer application, the head, the whole KV cache) over the memory bandwidth,
when the calibration has one, plus the fixed cost per layer application. A device of the table
(`workers.calibrate.for_device`) has rates of its peak times an MFU, its bandwidth, and no fixed cost.
Peak memory: the kind's cost model on the device type the jobs run on; on CUDA a measured `peak_mem_mb`
of the same variant and batch replaces a train job's. A train job's `micro_batch`: its spec's
`micro_batch_size` when it gives a number, what `auto` picks on the device (`model.memory.
largest_micro_batch`, the trainer's own rule; the memory is then that forward's), else (the whole batch
per forward) the most that would fit, reported beside the whole batch's memory.
Disk: a train job's checkpoint (weights and optimizer state), final weights and metric spool
(`orchestrator.retention.PlannedDisk`).

Workers (`resources: {"workers": N}`, a data-parallel train job): the admission places N bundles, so
the simulation counts N devices for the job's whole time; the time itself is training at N times a
worker's throughput times `DDP_EFFICIENCY` (the gradient all-reduce on top of the compute, which NCCL
mostly overlaps with the backward on one box: an assumption until the history has a run of that worker
count, whose measured throughput then replaces it), plus evaluations and checkpoints at one worker's
speed (rank 0 does them alone).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from looplab.lab.planner.history import Followed, finished_runs, variant_of
from looplab.lab.planner.local_machine import DEFAULT_STARTUP_S, Calibration, cached_calibration
from looplab.lab.planner.machine_factor import Factor, MachineFactors
from looplab.model.errors import ConfigError
from looplab.orchestrator import jobkinds, pairing
from looplab.orchestrator.estimate_source import EstimateSource
from looplab.orchestrator.jobkinds import Pricing
from looplab.orchestrator.retention import PlannedDisk

if TYPE_CHECKING:
    from looplab.orchestrator.grid import JobPlan
    from looplab.workers.cost import ForwardCost
    from looplab.workers.train.cost import TrainCost
    from looplab.workers.train.spec import Spec as TrainSpec

# bytes of one metric point in a job's spool (orchestrator/task.py MetricSpool: a JSON line of ts, key,
# step, value, tokens, wall_s), for a point of a long run (6-10 digit steps and tokens, 17-digit floats)
SPOOL_POINT_BYTES = 140

# the throughput of N data-parallel workers over N times one worker's, until a run of N was measured
DDP_EFFICIENCY = 0.9


def ddp_speedup(workers: int) -> float:
    """How many times one worker's throughput `workers` data-parallel workers are estimated to train."""
    return 1.0 if workers == 1 else workers * DDP_EFFICIENCY


# what a spec the cost models cannot read raises (a plugin's spec, a test double's, an old config)
UNREADABLE = (ConfigError, ValueError, TypeError, KeyError, ZeroDivisionError, OSError)


@dataclass
class Estimate:
    """One job's estimate. `train_s` is a train job's training time alone (what an iso-time job copies)."""

    seconds: float | None
    source: EstimateSource
    flops: float | None = None
    peak_mem_bytes: float | None = None
    train_s: float | None = None
    # the part of `seconds` that a fresh worker process spends starting (imports, model build); a job
    # that Ray starts in a worker an earlier job left idle skips it (see lab/planner/simulate.py)
    startup_s: float = 0.0
    micro_batch: int | None = None  # a train job's sequences per forward (see the module docstring)
    micro_batch_given: bool = False  # the spec's micro_batch_size (else: the most that fit the device)
    disk: PlannedDisk | None = None
    factor: Factor | None = None  # `flop_fit`: this machine's factor the FLOP model's time was multiplied by


def _median(values: Iterable[float | None]) -> float | None:
    kept = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return statistics.median(kept) if kept else None


def _key(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, default=str)


class TimeModel:
    """Turns jobs' costs into wall seconds from this database's finished jobs and a calibration (one read
    of the history; `eng` None: no history). `device` is where the jobs will run ("cpu" or "cuda"), with
    `device_memory` bytes each (None: no micro-batch is fitted); `calibration` None leaves `flop_model`
    rows without a time (their FLOPs and memory are still given)."""

    def __init__(
        self,
        eng: Engine | None,
        calibration: Calibration | None,
        device: str = "cpu",
        device_memory: float | None = None,
    ) -> None:
        self.calibration, self.device, self.device_memory = calibration, device, device_memory
        self.history: list[dict[str, Any]] = finished_runs(eng) if eng is not None else []
        self._train: dict[str, tuple[TrainSpec, TrainCost] | None] = {}
        # start-up: what the finished train jobs spent besides training, evaluating and saving
        overheads = [h.get("overhead") for h in self.history]
        cal_startup = calibration.startup_s if calibration is not None else None
        self.startup_s = _median(overheads) or cal_startup or DEFAULT_STARTUP_S
        self._factors: MachineFactors | None = None

    # ---- the kinds' cost models (their declarations' `cost`: imported when a job is priced)
    def _train_of(self, kind: str, spec: dict[str, Any]) -> tuple[TrainSpec, TrainCost] | None:
        """The Spec and cost of a job of a kind priced as TRAINING; None for another kind or a spec its
        cost model cannot read."""
        key = f"{kind} {_key(spec)}"
        if key not in self._train:
            model = jobkinds.declared(kind).cost
            found = None
            if model is not None and model.pricing == Pricing.TRAINING:
                module = model.load()
                probe = dict(spec)
                if all(probe.get(k) is None for k in ("tokens", "time_s", "flops")):
                    probe["time_s"] = 1.0  # a budget resolved later (match_time_of): a time budget
                try:
                    train = module.Spec.from_dict(probe)
                    found = (train, module.cost(train))
                except UNREADABLE:
                    pass
            self._train[key] = found
        return self._train[key]

    def train_cost(self, kind: str, spec: dict[str, Any]) -> TrainCost | None:
        """The cost of a canonical spec of a kind priced as TRAINING; None when it is none."""
        found = self._train_of(kind, spec)
        return None if found is None else found[1]

    def forward_cost(
        self, kind: str, spec: dict[str, Any], trained: Followed | None = None
    ) -> ForwardCost | None:
        """The cost of a job of forward passes (a kind priced FORWARD, or ON_CHECKPOINT on the job it
        follows, `trained`: its kind and spec); None when it has none, or its checkpoint's is unknown."""
        model = jobkinds.declared(kind).cost
        if model is None or model.pricing == Pricing.TRAINING:
            return None
        module = model.load()
        job = module.Spec.from_dict(spec)
        if model.pricing == Pricing.FORWARD:
            return module.cost(job)
        train = None if trained is None else self.train_cost(*trained)
        return None if train is None else module.cost(job, train)

    # ---- estimates
    def estimate(
        self,
        kind: str,
        spec: dict[str, Any],
        *,
        trained: Followed | None = None,
        ref_train_s: float | None = None,
        workers: int = 1,
        waits: bool = False,
    ) -> Estimate:
        """One job, priced as its kind's declaration says (`Kind.cost`): a train job (`ref_train_s`: the
        training time a `match_time_of` budget copies; `workers`: its data-parallel workers), a job of
        forward passes (`trained`: the kind and spec of the job whose checkpoint it is about; `waits`:
        it starts only after other jobs end, so warm, see `forward_job`), or a kind without a cost
        model. A spec its kind's cost model cannot read (a plugin's, a test double's, an old config) is
        "unknown"."""
        try:
            return self._estimate(kind, spec, trained, ref_train_s, workers, waits)
        except UNREADABLE:
            return Estimate(None, EstimateSource.UNKNOWN)

    def _estimate(
        self,
        kind: str,
        spec: dict[str, Any],
        trained: Followed | None,
        ref_train_s: float | None,
        workers: int = 1,
        waits: bool = False,
    ) -> Estimate:
        declared = jobkinds.declared(kind)
        if declared.pricing == Pricing.TRAINING:
            return self.train(kind, spec, ref_train_s, workers)
        cost = self.forward_cost(kind, spec, trained)
        if cost is not None:
            # the variant of the model it runs: the checkpoint's it is about, else its spec's own
            about = trained if declared.pricing == Pricing.ON_CHECKPOINT else (kind, spec)
            variant = None if about is None else variant_of(about[1], about[0])
            return self.forward_job(
                kind,
                cost,
                variant,
                lambda h: self.forward_cost(kind, h["spec"], h.get("trained")),
                warm=waits or trained is not None,
            )
        wall = _median(h["wall"] for h in self.history if h["kind"] == kind)
        return Estimate(wall, EstimateSource.FINISHED if wall is not None else EstimateSource.UNKNOWN)

    def micro_batch(self, train: TrainSpec, cost: TrainCost) -> tuple[int | None, bool]:
        """(sequences per forward, whether the run will use it): the spec's `micro_batch_size` as given;
        with `auto`, what the trainer picks on `device_memory` (`model.memory.largest_micro_batch`, the
        same rule); else (the whole batch per forward) the most that would fit. None when not even one
        sequence fits, or without a device memory."""
        from looplab.model.memory import HEADROOM, largest_micro_batch

        given = getattr(train, "micro_batch_size", None)  # an execution field of newer train Specs
        if isinstance(given, int):
            return given, True
        fit = None
        if self.device_memory is not None:
            fit = largest_micro_batch(
                lambda n: cost.memory_at(n, self.device), cost.batch, self.device_memory
            )
            if cost.memory_at(fit, self.device) > HEADROOM * self.device_memory:
                fit = None  # not even one sequence
        return fit, given == "auto" and fit is not None

    def train(
        self, kind: str, spec: dict[str, Any], ref_train_s: float | None = None, workers: int = 1
    ) -> Estimate:
        found = self._train_of(kind, spec)
        if found is None:
            return Estimate(None, EstimateSource.UNKNOWN)
        est = self._train_estimate(kind, spec, found[1], ref_train_s, workers)
        est.micro_batch, est.micro_batch_given = self.micro_batch(*found)
        if est.micro_batch_given:
            est.peak_mem_bytes = found[1].memory_at(est.micro_batch, self.device)
        return est

    def _train_estimate(
        self, kind: str, spec: dict[str, Any], cost: TrainCost, ref_train_s: float | None, workers: int = 1
    ) -> Estimate:
        variant = variant_of(spec, kind)
        alike = [
            h
            for h in self.history
            if h["kind"] == kind
            and h["variant_id"] == variant
            and h["tokens_per_s"]
            and h["batch_size"] == cost.batch
            and h["compile"] == cost.compile
            and h["device"] == self.device
        ]
        same = [h for h in alike if h.get("workers", 1) == workers]
        # no run of this worker count yet: one worker's throughput, scaled (see DDP_EFFICIENCY)
        scale = 1.0 if same else ddp_speedup(workers)
        same = same or [h for h in alike if h.get("workers", 1) == 1]
        memory = cost.memory[self.device]
        if self.device == "cuda":
            memory = _median(h["peak_mem_mb"] * 2**20 for h in same if h["peak_mem_mb"]) or memory
        if same:
            source = EstimateSource.MEASURED
            tokens_per_s = _median(h["tokens_per_s"] for h in same) * scale
            eval_rate = _median(self._eval_flops_of(h) / h["eval_seconds"] for h in same if h["eval_seconds"])
            per_ckpt = (
                _median(h["ckpt_seconds"] / self._ckpts_of(h) for h in same if h["ckpt_seconds"]) or 0.0
            )
            startup = _median(h["overhead"] for h in same)
        elif self.calibration is not None:
            factor = self.factors.get(kind)
            slower = 1.0 if factor is None else factor.value
            source = EstimateSource.FLOP_MODEL if factor is None else EstimateSource.FLOP_FIT
            tokens_per_s = cost.tokens_per_step / self._step_seconds(cost) * ddp_speedup(workers) / slower
            eval_rate = self.calibration.rates(cost.cfg.d_model)[1] / slower
            per_ckpt = cost.checkpoint_bytes / self.calibration.save_bytes_per_s
            startup = self.startup_s
        else:
            source, tokens_per_s, eval_rate, per_ckpt = EstimateSource.UNKNOWN, None, None, 0.0
            startup = self.startup_s
        step_s = cost.tokens_per_step / tokens_per_s if tokens_per_s else None
        budget_s = ref_train_s if ref_train_s is not None else spec.get("time_s")
        steps = cost.steps
        calib_s = 0.0
        disk = PlannedDisk(cost.checkpoint_bytes, cost.final_bytes, 0.0, keep=cost.keep_checkpoints)
        if steps is None:  # a time budget: trains budget_s, after a calibration on a copy of the model
            if budget_s is None:
                return Estimate(None, EstimateSource.UNKNOWN, peak_mem_bytes=memory, disk=disk)
            train_s = float(budget_s)
            if step_s is None:
                return Estimate(
                    train_s + startup,
                    EstimateSource.BUDGET,
                    peak_mem_bytes=memory,
                    train_s=train_s,
                    startup_s=startup,
                    disk=disk,
                )
            steps = max(1, int(train_s / step_s))
            calib_s = max(cost.calib_steps * step_s, min(0.05 * train_s, 60.0)) + 2 * step_s
        elif step_s is None:
            return Estimate(
                None,
                source,
                flops=steps * cost.tokens_per_step * cost.flops_per_token,
                peak_mem_bytes=memory,
                disk=self._disk(cost, steps),
            )
        else:
            train_s = steps * step_s
        flops = steps * cost.tokens_per_step * cost.flops_per_token
        eval_flops = cost.n_evals(steps) * cost.eval_flops
        eval_s = eval_flops / eval_rate if eval_rate else 0.0
        ckpt_s = per_ckpt * cost.n_ckpts(steps)
        seconds = (startup or 0.0) + calib_s + train_s + eval_s + ckpt_s
        est = Estimate(
            seconds, source, flops + eval_flops, memory, train_s, startup or 0.0, disk=self._disk(cost, steps)
        )
        est.factor = self.factors.get(kind) if source == EstimateSource.FLOP_FIT else None
        return est

    @staticmethod
    def _disk(cost: TrainCost, steps: int) -> PlannedDisk:
        return PlannedDisk(
            cost.checkpoint_bytes,
            cost.final_bytes,
            cost.metric_points(steps) * SPOOL_POINT_BYTES,
            saves=cost.n_ckpts(steps),
            keep=cost.keep_checkpoints,
        )

    def _step_seconds(self, cost: TrainCost) -> float:
        """One training step by the FLOP model: the parts with autograd at the calibrated training
        rate, the forward of gradient-free rounds at the forward rate, plus the optimizer's step."""
        cal = self.calibration
        assert cal is not None
        train_rate, forward_rate = cal.rates(cost.cfg.d_model)
        no_grad = max(0.0, cost.flops_per_token - cost.grad_flops_per_token)
        per_token = cost.grad_flops_per_token / train_rate + no_grad / forward_rate
        return cost.tokens_per_step * per_token + cal.optimizer_s(cost.optimizer, cost.params)

    def _eval_flops_of(self, h: dict[str, Any]) -> float:
        cost = self.train_cost(h["kind"], h["spec"])
        return 0.0 if cost is None else cost.n_evals(h["steps"]) * cost.eval_flops

    def _ckpts_of(self, h: dict[str, Any]) -> int:
        cost = self.train_cost(h["kind"], h["spec"])
        return 1 if cost is None else cost.n_ckpts(h["steps"])

    def forward_job(
        self,
        kind: str,
        cost: ForwardCost,
        variant: str | None,
        counted: Callable[[dict[str, Any]], ForwardCost | None],
        warm: bool = False,
    ) -> Estimate:
        """A job of forward passes: the median of finished runs of the same kind and variant (and device
        type when its cost model is `per_device`), each wall time scaled by this run's work over theirs
        (`_forward_ratio`; `counted(h)`: their cost, None when unknown; such runs are skipped); without
        any, the FLOP model times this machine's factor for the kind, else "unknown".

        Start-up by the FLOP model: a fresh worker process's (`startup_s`), except for a job that
        starts only after other jobs end (`warm`): one that depends on another (a depth sweep on its
        train job's checkpoint) or needs the node to itself (an exclusive decode bench waits until the
        node is empty). It starts in a worker process those jobs left idle (Ray reuses it), so it pays
        no start-up; charging one made such a job's estimate several times its run wherever the
        start-up (a torch import and a model build) outweighs its few forwards. (The first job of an
        idle queue is the exception: it starts cold.)"""
        model = jobkinds.declared(kind).cost
        same_device = model is not None and model.per_device
        memory = cost.memory[self.device]
        same = [
            h
            for h in self.history
            if h["kind"] == kind
            and h["variant_id"] == variant
            and (not same_device or h["device"] == self.device)
        ]
        scaled = []
        for h in same:
            try:
                theirs = counted(h)
            except UNREADABLE:
                theirs = None
            if theirs and theirs.flops > 0:
                scaled.append(h["wall"] * self._forward_ratio(cost, theirs))
        if scaled:
            return Estimate(_median(scaled), EstimateSource.FINISHED, cost.flops, memory)
        cal = self.calibration
        if cal is None:
            return Estimate(None, EstimateSource.UNKNOWN, cost.flops, memory)
        factor = self.factors.get(kind)
        seconds = self._forward_seconds(cost) * (1.0 if factor is None else factor.value)
        startup = 0.0 if warm else self.startup_s
        source = EstimateSource.FLOP_MODEL if factor is None else EstimateSource.FLOP_FIT
        return Estimate(startup + seconds, source, cost.flops, memory, startup_s=startup, factor=factor)

    def _forward_ratio(self, cost: ForwardCost, theirs: ForwardCost) -> float:
        """How many times a finished job's (`theirs`) work this one's is: by the FLOP model's time with a
        calibration (a decode bench's steps at other contexts or batches are bound by the bytes they
        read and a fixed cost per layer, not by FLOPs), else by FLOPs."""
        if self.calibration is None:
            return cost.flops / theirs.flops
        return self._forward_seconds(cost) / self._forward_seconds(theirs)

    def _forward_seconds(self, cost: ForwardCost) -> float:
        """A job of forward passes' work by the FLOP model alone: decode steps (`_decode_seconds`), else
        its forwards at the forward rate of its width."""
        assert self.calibration is not None
        if cost.decode_steps:
            return self._decode_seconds(cost)
        return cost.flops / self.calibration.rates(cost.d_model)[1]

    # ---- this machine's correction of the FLOP model (lab/planner/machine_factor.py)
    @property
    def factors(self) -> MachineFactors:
        """Per kind, actual over FLOP-model time of this device type's finished jobs (read once)."""
        if self._factors is None:
            ratios: dict[str, list[float]] = {}
            if self.calibration is not None:
                for h in self.history:
                    if h.get("device") != self.device:
                        continue
                    try:
                        ratio = self._flop_ratio(h)
                    except UNREADABLE:
                        ratio = None
                    if ratio is not None and math.isfinite(ratio) and ratio > 0:
                        ratios.setdefault(h["kind"], []).append(ratio)
            self._factors = MachineFactors(ratios)
        return self._factors

    def _flop_ratio(self, h: dict[str, Any]) -> float | None:
        """A finished job's actual over FLOP-model time: a train job's FLOP-model throughput over its
        measured one (training alone), a job of forward passes' wall over its FLOP-model work (no
        start-up, as such a job is planned when it waits); None when its cost is unknown."""
        model = jobkinds.declared(h["kind"]).cost
        if model is None:
            return None
        if model.pricing == Pricing.TRAINING:
            cost = self.train_cost(h["kind"], h["spec"])
            if cost is None or not h.get("tokens_per_s"):
                return None
            planned = cost.tokens_per_step / self._step_seconds(cost) * ddp_speedup(h.get("workers", 1))
            return planned / h["tokens_per_s"]
        cost = self.forward_cost(h["kind"], h["spec"], h.get("trained"))
        if cost is None or cost.flops <= 0:
            return None
        return h["wall"] / self._forward_seconds(cost)

    def _decode_seconds(self, cost: ForwardCost) -> float:
        """Decode steps: per cell, its steps at the larger of their FLOPs over the training rate and their
        bytes over the memory bandwidth (when the calibration has one), plus a fixed cost per layer
        application of every step."""
        cal = self.calibration
        assert cal is not None
        cells = cost.cells.get(self.device) or ((cost.decode_steps, cost.flops / cost.decode_steps, 0.0),)
        bandwidth = cal.memory_bandwidth
        bound = sum(
            n * max(flops / cal.flops_per_s, read / bandwidth if bandwidth else 0.0)
            for n, flops, read in cells
        )
        return bound + cost.decode_steps * cost.applications * cal.decode_layer_s


class LazyTimeModel:
    """A TimeModel built on first use: a queue whose jobs all carry stored estimates needs no model code
    (and no torch import) to forecast."""

    def __init__(self, eng: Engine, device: str) -> None:
        self.eng, self.device, self._inner = eng, device, None

    def estimate(self, *args: Any, **kwargs: Any) -> Estimate:
        if self._inner is None:
            self._inner = TimeModel(self.eng, cached_calibration(self.device), self.device)
        return self._inner.estimate(*args, **kwargs)


def estimate_plans(
    model: TimeModel, plans: list[JobPlan], existing_train_s: dict[int, tuple[float, int]] | None = None
) -> list[Estimate]:
    """One estimate per plan, references before the jobs whose budget copies their training time
    (`existing_train_s`: the training seconds and workers of references in the database; what is
    copied is `pairing.time_budget`'s)."""
    from looplab.orchestrator.grid import trained_plan
    from looplab.orchestrator.jobkinds import job_resources
    from looplab.orchestrator.submission import deps_first

    existing_train_s = existing_train_s or {}
    pairs = pairing.members(plans)  # iso-time pairs: exclusive by default
    out: dict[int, Estimate] = {}
    for i in deps_first(plans):
        plan = plans[i]
        res = job_resources(plan.kind, plan.resources, model.device == "cuda", exclusive_default=i in pairs)
        workers = pairing.workers_of(plan.resources)
        ref, ref_train_s = pairing.reference(plan), None
        if ref is not None:
            if ref.job is not None:
                seconds, ref_workers = existing_train_s.get(ref.job, (None, 1))
            else:
                seconds, ref_workers = out[ref.plan].train_s, pairing.workers_of(plans[ref.plan].resources)
            ref_train_s = None if seconds is None else pairing.time_budget(seconds, ref_workers, workers)
        about = trained_plan(plans, i)
        trained = None if about is None else (about.kind, about.spec)
        out[i] = model.estimate(
            plan.kind,
            plan.spec,
            trained=trained,
            ref_train_s=ref_train_s,
            workers=workers,
            waits=bool(plan.deps) or res["exclusive"],  # it starts after others end: see forward_job
        )
    return [out[i] for i in range(len(plans))]
