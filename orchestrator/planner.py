"""How long will this grid take? Per-job estimates of wall time, FLOPs and peak memory, and the
queue's finish time, before anything is submitted (`looplab plan`, `Queue.plan`, `looplab status`).

Where an estimate comes from (the `source` of each row):
- `measured`: train jobs. The median throughput (`train_results.tokens_per_s`) of finished runs of
  the same variant (`jobs.variant_id`), batch size, compile flag and device type; their evaluation
  FLOP/s, seconds per checkpoint and start-up overhead (wall time less training, evaluation and
  checkpoints) give the rest.
- `flop_model`: the FLOPs of the job (`model.flops`: training forward+backward per token times the
  tokens; evaluations, sweeps and decode steps as forward passes) over the achieved FLOP/s of a short
  calibration on this machine (a few training steps of the tiny model, cached per machine and device
  in `$LOOPLAB_CACHE/planner/calibration.json`); decode steps add a fixed cost per layer application,
  also calibrated. Start-up overhead: the median over finished train jobs of this database, else the
  calibration's (a fresh Python importing torch and building a model).
- `finished`: depth sweeps and decode benches. Finished jobs of the same kind and variant, their wall
  time scaled by the ratio of forward FLOPs.
- `budget`: a time budget (or `match_time_of`) whose throughput is unknown: the budget plus start-up.
- `unknown`: nothing to go on (a plugin's kind never run before, or no calibration): no estimate.

Peak memory (bytes), training: 4 P (fp32 weights) + 4 P (gradients) + the optimizer's state (AdamW:
8 P; the Muon optimizers: 4 P_matrix momentum + 8 P_embedding) + activations B T (a A + 8 V), where
P = parameters, A = layer applications with autograd (prelude + coda + recurrent layers x the mean
rounds with gradient, `model.flops`), a = bytes kept per token and application ((6 d + 4 h D + 2 m)
elements of 4 bytes on the CPU, 2 under CUDA autocast, plus h T softmax probabilities on the CPU,
whose math attention keeps them; fused CUDA kernels keep none) and 8 V the fp32 logits and their
gradient. On CUDA a measured `peak_mem_mb` of the same variant and batch replaces the formula. A job
whose estimate exceeds its device's memory (the GPU's, times its GPU fraction; the machine's RAM on
the CPU) is flagged `fits = False`.

The finish time replays the scheduler's policy on the estimates (orchestrator/scheduler.py): ready
jobs in priority order, each started when its CPUs/GPUs are free, a job that does not fit reserving
what it asks for against lower priorities, an exclusive job only on an empty node with nothing
started beside it; the queue's queued and running jobs go first (a running one for what is left of
it). Priority aging is not replayed: the plan assumes no job waits long enough to age. Everything here reads the database and never writes it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import Engine

from orchestrator.schema import Attempt, DecodeBench, GridRow, JobDep, TrainResult
from orchestrator.schema import Job as JobRow
from orchestrator.states import AttemptOutcome, JobStatus

if TYPE_CHECKING:
    import pandas as pd

    from orchestrator.grid import Grid, JobPlan
    from workers.jobs import JobRegistry

SOURCES = ("measured", "flop_model", "finished", "budget", "unknown")
JOBS = JobRow.__table__
CALIBRATION_FILE = "calibration.json"
CALIBRATION_VERSION = 2  # 2: forward-only rate, optimizer step cost, queue start-up, load; 1 is re-measured
CALIBRATION_MAX_AGE_S = (
    7 * 24 * 3600.0
)  # older calibrations are measured again (the machine may have changed)
DEFAULT_STARTUP_S = 5.0  # when neither the database nor a calibration says better
FLOAT_BYTES = 4


# ---------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Calibration:
    """What this machine achieves: FLOP/s of the tiny model's forward+backward (rounds with autograd)
    and of its forward without autograd (evaluations, and the gradient-free rounds of parcae-like
    recipes, which run at another rate), the optimizer's step time per parameter (per optimizer), the
    fixed cost of one layer application in a decode step, checkpoint bytes written per second, a job's
    start-up time and the queue's (a driver starting Ray). `load`: the machine's 1-minute load average
    per CPU when it was measured (above 1, other processes competed and the rates are too low)."""

    device: str  # "cpu" or "cuda"
    flops_per_s: float
    decode_layer_s: float
    save_bytes_per_s: float
    startup_s: float
    threads: int = 1
    host: str = ""
    measured_at: float = 0.0
    forward_flops_per_s: float | None = None  # None: as flops_per_s
    opt_s_per_param: dict[str, float] | None = None  # optimizer name -> seconds per step per parameter
    driver_start_s: float = 0.0  # `looplab run` until the first job can start (Ray start-up)
    load: float | None = None
    # [d_model, forward+backward FLOP/s, forward FLOP/s] at each calibrated width (None: flops_per_s)
    width_rates: list[list[float]] | None = None

    def rates(self, d_model: int) -> tuple[float, float]:
        """(training, forward) FLOP/s at width `d_model`: log-log interpolated between the calibrated
        widths, the nearest one's outside them (never extrapolated)."""
        points = sorted(self.width_rates or [[d_model, self.flops_per_s, self.forward_flops_per_s]])
        forward = [p[2] or p[1] for p in points]
        if d_model <= points[0][0] or len(points) == 1:
            return points[0][1], forward[0]
        if d_model >= points[-1][0]:
            return points[-1][1], forward[-1]
        i = next(k for k in range(1, len(points)) if d_model <= points[k][0])
        t = math.log(d_model / points[i - 1][0]) / math.log(points[i][0] / points[i - 1][0])

        def between(a: float, b: float) -> float:
            return math.exp(math.log(a) + t * (math.log(b) - math.log(a)))

        return between(points[i - 1][1], points[i][1]), between(forward[i - 1], forward[i])

    @property
    def contended(self) -> bool:
        return self.load is not None and self.load > 1.0

    def optimizer_s(self, optimizer: str, params: int) -> float:
        """Seconds of one optimizer step over `params` parameters (0 when not measured)."""
        per = self.opt_s_per_param or {}
        rate = per.get(optimizer, statistics.median(per.values()) if per else 0.0)
        return rate * params


def _calibration_key(device: str, threads: int) -> str:
    return f"{socket.gethostname()}|{device}|{threads}"


def calibration_path() -> Path:
    from workers.corpus import cache_root

    return cache_root() / "planner" / CALIBRATION_FILE


def cached_calibration(device: str = "cpu", threads: int = 1) -> Calibration | None:
    """This machine's cached calibration for `device`, or None (never measures)."""
    try:
        saved = json.loads(calibration_path().read_text())
        entry = saved[_calibration_key(device, threads)]
        if entry.pop("version", None) != CALIBRATION_VERSION:
            return None
        cal = Calibration(**entry)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if time.time() - cal.measured_at > CALIBRATION_MAX_AGE_S:
        return None  # stale: the machine, its load or the code may have changed
    return cal


def calibrate(device: str = "cpu", threads: int = 1, steps: int = 15, save: bool = True,
              driver: bool = True) -> Calibration:  # fmt: skip
    """Measure this machine (about 15 s on a CPU core) and cache the result: `steps` timed forward+
    backward passes of the tiny `lean` model after three untimed ones, as many forwards without
    autograd, the step of each optimizer, a few decode steps, one checkpoint write, the start-up of a
    fresh Python that imports torch and builds a model, and (`driver`) of one that starts a local Ray
    as `looplab run` does. On the CPU `threads` torch threads (a job gets as many as its num_cpus;
    Ray sets OMP_NUM_THREADS so)."""
    import tempfile

    import torch

    from model.flops import training_flops
    from model.looped import LoopedLM
    from model.presets import preset
    from workers.optim import OPTIMIZERS, build_optimizers

    load = os.getloadavg()[0] / (os.cpu_count() or 1) if hasattr(os, "getloadavg") else None

    dev = torch.device("cuda" if device == "cuda" else "cpu")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    old_threads = torch.get_num_threads()
    if dev.type == "cpu":
        torch.set_num_threads(threads)
    try:
        cfg = preset("lean", "tiny")
        batch, seq = 8, cfg.seq_len
        torch.manual_seed(0)
        autocast = torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else None

        def forward(model: LoopedLM, x: torch.Tensor, grad: bool) -> None:
            with torch.set_grad_enabled(grad):
                if autocast is None:
                    out = model(x, targets=x)
                else:
                    with autocast:
                        out = model(x, targets=x)
            if grad:
                out.loss.backward()

        def timed(fn: Callable[[], None]) -> float:
            for _ in range(3):  # allocation, first-call costs
                fn()
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                fn()
            sync()
            return (time.perf_counter() - t0) / steps

        def rates(width_cfg) -> tuple[LoopedLM, float, float]:
            """(the model, forward+backward FLOP/s, forward FLOP/s without autograd) at batch x seq."""
            model = LoopedLM(width_cfg).to(dev)
            x = torch.randint(0, width_cfg.vocab_size, (batch, seq), device=dev)  # (B, T)
            flops = training_flops(width_cfg, batch)
            train = flops.total * batch * seq / timed(lambda: forward(model, x, True))
            return model, train, flops.forward * batch * seq / timed(lambda: forward(model, x, False))

        # the rates grow with the width (bigger matrices, the same per-call overheads): measured at two
        wide = preset("lean", "small", seq_len=seq)
        _, wide_train, wide_forward = rates(wide)
        model, flops_per_s, forward_flops_per_s = rates(cfg)  # last: its gradients feed the optimizers
        width_rates = [
            [cfg.d_model, flops_per_s, forward_flops_per_s],
            [wide.d_model, wide_train, wide_forward],
        ]
        n_params = sum(p.numel() for p in model.parameters())
        opt_s_per_param, opts = {}, []
        for name in OPTIMIZERS:  # gradients are left in place by the last backward above
            opts = build_optimizers(model, name, None, None, None)
            opt_s_per_param[name] = timed(lambda opts=opts: [o.step() for o in opts]) / n_params

        model.eval()
        context, n_steps = 32, 6
        cache = model.setup_cache(1, context, device=dev)
        cache.fake_fill(context - n_steps - 2)
        token = torch.zeros(1, dtype=torch.long, device=dev)
        with torch.no_grad():
            model.decode_step(token, cache)
            sync()
            t0 = time.perf_counter()
            for _ in range(n_steps):
                model.decode_step(token, cache)
            sync()
        applications = cfg.n_prelude + cfg.n_recurrent * cfg.loops + cfg.n_coda
        decode_layer_s = (time.perf_counter() - t0) / n_steps / applications

        with tempfile.TemporaryDirectory() as tmp:
            state = {"model": model.state_dict(), "opt": [o.state_dict() for o in opts]}
            t0 = time.perf_counter()
            torch.save(state, Path(tmp) / "c.pt")
            save_s = time.perf_counter() - t0
            save_bytes_per_s = (Path(tmp) / "c.pt").stat().st_size / max(save_s, 1e-6)
    finally:
        torch.set_num_threads(old_threads)
    startup_s = _startup_seconds()
    driver_start_s = _subprocess_seconds(_DRIVER_START) if driver else 0.0
    result = Calibration(device, flops_per_s, decode_layer_s, save_bytes_per_s, startup_s, threads,
                         socket.gethostname(), time.time(), forward_flops_per_s, opt_s_per_param,
                         driver_start_s or 0.0, load, width_rates)  # fmt: skip
    if save:
        _save_calibration(result)
    return result


_JOB_START = "import torch; from model.looped import LoopedLM; from model.presets import preset; LoopedLM(preset('lean'))"
# what `looplab run` does before its first job: import the driver, start a local Ray (and stop it)
_DRIVER_START = (
    "import ray, orchestrator.scheduler; ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, "
    "log_to_driver=False, configure_logging=False); ray.shutdown()"
)


def _subprocess_seconds(code: str) -> float | None:
    """Wall time of a fresh Python running `code` in the repository, None when it fails."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a new local Ray, not a running one
    t0 = time.perf_counter()
    try:
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120,
                       cwd=str(Path(__file__).resolve().parents[1]), env=env)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return time.perf_counter() - t0


def _startup_seconds() -> float:
    """Wall time of a fresh Python that imports torch and builds the tiny model (a job's fixed cost)."""
    return _subprocess_seconds(_JOB_START) or DEFAULT_STARTUP_S


def _save_calibration(cal: Calibration) -> None:
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        saved = {}
    saved[_calibration_key(cal.device, cal.threads)] = {
        **dataclasses.asdict(cal),
        "version": CALIBRATION_VERSION,
    }
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(saved, indent=1))
    os.replace(tmp, path)


# ---------------------------------------------------------------- per-job estimates


@dataclass
class Estimate:
    """One job's estimate. `train_s` is a train job's training time alone (what an iso-time job copies)."""

    seconds: float | None
    source: str
    flops: float | None = None
    peak_mem_bytes: float | None = None
    train_s: float | None = None
    # the part of `seconds` that a fresh worker process spends starting (imports, model build); a job
    # that Ray starts in a worker an earlier job left idle skips it (see `schedule`)
    startup_s: float = 0.0


@dataclass
class _TrainFacts:
    """What a train spec implies, from the config alone."""

    cfg: Any
    batch: int
    tokens_per_step: int
    steps: int | None  # None for a time budget
    flops_per_token: float  # training forward + backward
    grad_flops_per_token: float  # of which the parts run with autograd (their forward and backward)
    eval_flops: float  # forward FLOPs of one evaluation
    eval_every: int
    ckpt_every: int
    params: int
    params_non_embedding: int
    optimizer: str
    compile: bool

    def n_evals(self, steps: float) -> int:
        steps = max(1, int(steps))
        return steps // self.eval_every + (1 if steps % self.eval_every else 0)

    def n_ckpts(self, steps: float) -> int:
        return max(1, int(steps)) // self.ckpt_every + 1  # and the final save


def _forward_per_token(cfg: Any, loops: int, seq_len: int | None = None) -> float:
    from model.flops import step_flops

    return float(step_flops(cfg, int(loops), seq_len=seq_len).forward)


def train_facts(spec: dict[str, Any]) -> _TrainFacts | None:
    """The FLOP and step arithmetic of a canonical train spec; None when it names no known model."""
    from model.counts import param_count, tokens_for_flops
    from model.flops import BACKWARD_FACTOR, training_flops
    from orchestrator.variants import resolve

    resolved = resolve("train", spec)
    if resolved is None:
        return None
    cfg, batch = resolved.cfg, resolved.batch_size
    seq = cfg.seq_len
    tokens_per_step = batch * seq
    if spec.get("tokens") is not None:
        steps = max(1, int(spec["tokens"]) // tokens_per_step)
    elif spec.get("flops") is not None:
        steps = tokens_for_flops(cfg, float(spec["flops"]), batch, seq) // tokens_per_step
    else:
        steps = None
    eval_loops = spec.get("eval_loops")
    if eval_loops is None:
        looped = cfg.injection != "none" or cfg.loops > 1
        eval_loops = [1, 2, 4, 8] if looped else [cfg.loops]
    counts = [cfg.loops, *(n for n in eval_loops if n != cfg.loops)]
    eval_tokens = max(1, int(spec.get("eval_tokens") or seq) // seq) * seq
    eval_flops = eval_tokens * sum(_forward_per_token(cfg, n) for n in counts)
    params = param_count(cfg)
    flops = training_flops(cfg, batch)
    return _TrainFacts(
        cfg=cfg, batch=batch, tokens_per_step=tokens_per_step, steps=steps,
        flops_per_token=float(flops.total), grad_flops_per_token=float(flops.backward * (1 + 1 / BACKWARD_FACTOR)),
        eval_flops=eval_flops,
        eval_every=int(spec.get("eval_every") or 50), ckpt_every=int(spec.get("ckpt_every") or 100),
        params=params["total"], params_non_embedding=params["non_embedding"],
        optimizer=str(spec.get("optimizer") or "parcae"), compile=bool(spec.get("compile")),
    )  # fmt: skip


def train_memory(facts: _TrainFacts, device: str) -> float:
    """Peak training memory in bytes by the formula of the module docstring."""
    from model.flops import training_flops

    cfg, p = facts.cfg, facts.params
    p_emb = facts.params - facts.params_non_embedding
    optimizer = 8 * p if facts.optimizer == "adamw" else 4 * facts.params_non_embedding + 8 * p_emb
    grad_rounds = training_flops(cfg, facts.batch).mean_grad_rounds
    applications = cfg.n_prelude + cfg.n_coda + cfg.n_recurrent * grad_rounds
    hd = cfg.n_heads * cfg.head_dim
    elements = 6 * cfg.d_model + 4 * hd + 2 * cfg.mlp_hidden
    per_application = elements * (2 if device == "cuda" else FLOAT_BYTES)
    if device != "cuda":
        per_application += FLOAT_BYTES * cfg.n_heads * cfg.seq_len  # softmax probabilities (math path)
    activations = facts.tokens_per_step * (applications * per_application + 2 * FLOAT_BYTES * cfg.vocab_size)
    return float(2 * FLOAT_BYTES * p + optimizer + activations)


def _median(values: Iterable[float | None]) -> float | None:
    kept = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return statistics.median(kept) if kept else None


def _device_type(device: str | None) -> str:
    return "cuda" if device and str(device).startswith("cuda") else "cpu"


class Estimator:
    """Estimates jobs from this database's finished jobs and a calibration (one read of the history).

    `device` is where the jobs will run ("cpu" or "cuda"); `calibration` None leaves `flop_model`
    rows without a time (their FLOPs and memory are still given)."""

    def __init__(self, eng: Engine | None, calibration: Calibration | None, device: str = "cpu") -> None:
        self.calibration, self.device = calibration, device
        self.history: list[dict[str, Any]] = _history(eng) if eng is not None else []
        self._facts: dict[str, _TrainFacts | None] = {}
        overheads = [h["overhead"] for h in self.history if h["kind"] == "train"]
        cal_startup = calibration.startup_s if calibration is not None else None
        self.startup_s = _median(overheads) or cal_startup or DEFAULT_STARTUP_S

    def facts(self, spec: dict[str, Any]) -> _TrainFacts | None:
        key = json.dumps(spec, sort_keys=True, default=str)
        if key not in self._facts:
            self._facts[key] = train_facts(spec)
        return self._facts[key]

    def estimate(self, kind: str, spec: dict[str, Any], *, train_spec: dict[str, Any] | None = None,
                 ref_train_s: float | None = None) -> Estimate:  # fmt: skip
        """One job: a train spec (`ref_train_s`: the training time a `match_time_of` budget copies),
        a depth sweep (`train_spec`: its train job's spec), a decode bench, or any other kind."""
        if kind == "train":
            return self.train(spec, ref_train_s)
        if kind == "depth_sweep" and train_spec is not None:
            return self.depth_sweep(spec, train_spec)
        if kind == "decode_bench":
            return self.decode_bench(spec)
        walls = [h["wall"] for h in self.history if h["kind"] == kind]
        wall = _median(walls)
        return Estimate(wall, "finished" if wall is not None else "unknown")

    # ---- train
    def train(self, spec: dict[str, Any], ref_train_s: float | None = None) -> Estimate:
        facts = self.facts(spec)
        if facts is None:
            return Estimate(None, "unknown")
        variant = _variant(spec)
        same = [
            h for h in self.history
            if h["kind"] == "train" and h["variant_id"] == variant and h["tokens_per_s"]
            and h["batch_size"] == facts.batch and h["compile"] == facts.compile and h["device"] == self.device
        ]  # fmt: skip
        memory = train_memory(facts, self.device)
        if self.device == "cuda":
            memory = _median(h["peak_mem_mb"] * 2**20 for h in same if h["peak_mem_mb"]) or memory
        if same:
            source = "measured"
            tokens_per_s = _median(h["tokens_per_s"] for h in same)
            eval_rate = _median(
                self._eval_flops_of(h) / h["eval_seconds"] for h in same if h["eval_seconds"]
            )  # fmt: skip
            per_ckpt = (
                _median(h["ckpt_seconds"] / self._ckpts_of(h) for h in same if h["ckpt_seconds"]) or 0.0
            )
            startup = _median(h["overhead"] for h in same)
        elif self.calibration is not None:
            source = "flop_model"
            tokens_per_s = facts.tokens_per_step / self._step_seconds(facts)
            eval_rate = self.calibration.rates(facts.cfg.d_model)[1]
            per_ckpt = (
                3 * FLOAT_BYTES * facts.params / self.calibration.save_bytes_per_s
            )  # weights + 2 moments
            startup = self.startup_s
        else:
            source, tokens_per_s, eval_rate, per_ckpt, startup = "unknown", None, None, 0.0, self.startup_s
        step_s = facts.tokens_per_step / tokens_per_s if tokens_per_s else None
        budget_s = ref_train_s if ref_train_s is not None else spec.get("time_s")
        steps = facts.steps
        calib_s = 0.0
        if steps is None:  # a time budget: trains budget_s, after a calibration on a copy of the model
            if budget_s is None:
                return Estimate(None, "unknown", peak_mem_bytes=memory)
            train_s = float(budget_s)
            if step_s is None:
                return Estimate(train_s + startup, "budget", peak_mem_bytes=memory, train_s=train_s,
                                startup_s=startup)  # fmt: skip
            steps = max(1, int(train_s / step_s))
            calib_steps = int(spec.get("calib_steps") or 6)
            calib_s = max(calib_steps * step_s, min(0.05 * train_s, 60.0)) + 2 * step_s
        elif step_s is None:
            return Estimate(None, source, flops=steps * facts.tokens_per_step * facts.flops_per_token,
                            peak_mem_bytes=memory)  # fmt: skip
        else:
            train_s = steps * step_s
        flops = steps * facts.tokens_per_step * facts.flops_per_token
        eval_flops = facts.n_evals(steps) * facts.eval_flops
        eval_s = eval_flops / eval_rate if eval_rate else 0.0
        ckpt_s = per_ckpt * facts.n_ckpts(steps)
        seconds = (startup or 0.0) + calib_s + train_s + eval_s + ckpt_s
        return Estimate(seconds, source, flops + eval_flops, memory, train_s, startup or 0.0)

    def _step_seconds(self, facts: _TrainFacts) -> float:
        """One training step by the FLOP model: the parts with autograd at the calibrated training
        rate, the forward of gradient-free rounds at the forward rate, plus the optimizer's step."""
        cal = self.calibration
        assert cal is not None
        train_rate, forward_rate = cal.rates(facts.cfg.d_model)
        no_grad = max(0.0, facts.flops_per_token - facts.grad_flops_per_token)
        per_token = facts.grad_flops_per_token / train_rate + no_grad / forward_rate
        return facts.tokens_per_step * per_token + cal.optimizer_s(facts.optimizer, facts.params)

    def _eval_flops_of(self, h: dict[str, Any]) -> float:
        facts = self.facts(h["spec"])
        return 0.0 if facts is None else facts.n_evals(h["steps"]) * facts.eval_flops

    def _ckpts_of(self, h: dict[str, Any]) -> int:
        facts = self.facts(h["spec"])
        return 1 if facts is None else facts.n_ckpts(h["steps"])

    def _from_past_runs(
        self,
        flops: float,
        memory: float,
        same: list[dict[str, Any]],
        counted: Callable[[dict[str, Any]], Any],
    ) -> Estimate | None:
        """The estimate from finished runs of the same variant (`same`): the median of their wall times,
        each scaled by this run's FLOPs over theirs (`counted(h)` is `(flops, ...)` or None when
        unknown; such runs are skipped). With none of them and no calibration either: "unknown".
        None: the caller's FLOP model decides."""
        scaled = []
        for h in same:
            theirs = counted(h)
            if theirs and theirs[0] > 0:
                scaled.append(h["wall"] * flops / theirs[0])
        if scaled:
            return Estimate(_median(scaled), "finished", flops, memory)
        if self.calibration is None:
            return Estimate(None, "unknown", flops, memory)
        return None

    # ---- depth sweep
    def sweep_flops(self, spec: dict[str, Any], train_spec: dict[str, Any]) -> tuple[float, Any] | None:
        facts = self.facts(train_spec)
        if facts is None:
            return None
        from model.flops import head_flops
        from workers.depth_sweep import DEFAULT_INTERACTION_LOOPS, DEFAULT_LOOPS

        cfg = facts.cfg
        seq = cfg.seq_len
        tokens = max(1, int(spec.get("eval_tokens") or seq) // seq) * seq
        loops = spec.get("loops") or list(DEFAULT_LOOPS)
        # per depth: the loss forward, and the loop-geometry forward of the same tokens (no head)
        flops = tokens * sum(2 * _forward_per_token(cfg, n) - head_flops(cfg) for n in loops)
        # per interaction depth n: n forwards without the head (one plain, n - 1 with a round skipped)
        inter_loops = spec.get("interaction_loops")
        inter_loops = list(DEFAULT_INTERACTION_LOOPS) if inter_loops is None else inter_loops
        inter_tokens = min(tokens, max(seq, int(spec.get("interaction_tokens") or 4096) // seq * seq))
        flops += inter_tokens * sum(n * (_forward_per_token(cfg, n) - head_flops(cfg)) for n in inter_loops)
        return flops, facts

    def depth_sweep(self, spec: dict[str, Any], train_spec: dict[str, Any]) -> Estimate:
        counted = self.sweep_flops(spec, train_spec)
        if counted is None:
            return Estimate(None, "unknown")
        flops, facts = counted
        cfg = facts.cfg
        batch = int(spec.get("batch_size") or 8)
        memory = FLOAT_BYTES * facts.params + batch * cfg.seq_len * FLOAT_BYTES * (
            6 * cfg.d_model + 2 * cfg.mlp_hidden + cfg.n_heads * cfg.seq_len + 2 * cfg.vocab_size
        )
        variant = _variant(train_spec)
        same = [h for h in self.history if h["kind"] == "depth_sweep" and h["variant_id"] == variant]
        past = self._from_past_runs(
            flops,
            memory,
            same,
            lambda h: h.get("train_spec") and self.sweep_flops(h["spec"], h["train_spec"]),
        )
        if past is not None:
            return past
        rate = self.calibration.rates(cfg.d_model)[1]  # forwards only
        return Estimate(self.startup_s + flops / rate, "flop_model", flops, memory, startup_s=self.startup_s)

    # ---- decode bench
    def decode_flops(self, spec: dict[str, Any]) -> tuple[float, int, Any] | None:
        """(forward FLOPs of every timed and warm-up step, decode steps, config)."""
        from orchestrator.variants import resolve

        resolved = resolve("decode_bench", spec)
        if resolved is None:
            return None
        cfg = resolved.cfg
        per_cell = int(spec.get("warmup", 3)) + int(spec.get("steps", 20))
        flops, n = 0.0, 0
        for context in spec.get("context_lens") or [128]:
            per_token = _forward_per_token(cfg, cfg.loops, seq_len=int(context))
            for batch in spec.get("batch_sizes") or [1]:
                flops += per_cell * int(batch) * per_token
                n += per_cell
        return flops, n, cfg

    def decode_bench(self, spec: dict[str, Any]) -> Estimate:
        from model.counts import kv_cache_bytes, param_count

        counted = self.decode_flops(spec)
        if counted is None:
            return Estimate(None, "unknown")
        flops, n_steps, cfg = counted
        item = 2 if self.device == "cuda" else FLOAT_BYTES
        biggest = max(spec.get("context_lens") or [128]), max(spec.get("batch_sizes") or [1])
        memory = float(param_count(cfg)["total"] * item + kv_cache_bytes(cfg, *biggest, dtype="float32")
                       * item / FLOAT_BYTES + biggest[1] * cfg.vocab_size * FLOAT_BYTES)  # fmt: skip
        variant = _variant(spec, "decode_bench")
        same = [
            h
            for h in self.history
            if h["kind"] == "decode_bench" and h["variant_id"] == variant and h["device"] == self.device
        ]
        past = self._from_past_runs(flops, memory, same, lambda h: self.decode_flops(h["spec"]))
        if past is not None:
            return past
        applications = cfg.n_prelude + cfg.n_recurrent * cfg.loops + cfg.n_coda
        seconds = self.startup_s + flops / self.calibration.flops_per_s
        seconds += n_steps * applications * self.calibration.decode_layer_s
        return Estimate(seconds, "flop_model", flops, memory, startup_s=self.startup_s)


def _variant(spec: dict[str, Any], kind: str = "train") -> str | None:
    from orchestrator.variants import resolve, variant_id

    resolved = resolve(kind, spec)
    return None if resolved is None else variant_id(resolved.recipe, resolved.size, resolved.overrides)


def _history(eng: Engine) -> list[dict[str, Any]]:
    """Succeeded jobs whose successful attempt ran start to end (not resumed), with their results."""
    attempts = Attempt.__table__
    results = TrainResult.__table__
    query = (
        sa.select(
            JOBS.c.id,
            JOBS.c.kind,
            JOBS.c.variant_id,
            JOBS.c.config,
            attempts.c.started_at,
            attempts.c.ended_at,
            results.c.steps,
            results.c.tokens_per_s,
            results.c.train_seconds,
            results.c.eval_seconds,
            results.c.ckpt_seconds,
            results.c.device,
            results.c.peak_mem_mb,
        )  # fmt: skip
        .join(attempts, attempts.c.job_id == JOBS.c.id)
        .outerjoin(results, results.c.job_id == JOBS.c.id)
        .where(
            JOBS.c.status == JobStatus.SUCCEEDED,
            attempts.c.outcome == AttemptOutcome.SUCCEEDED,
            attempts.c.resumed_from_step.is_(None),
            attempts.c.ended_at.is_not(None),
        )
    )
    deps = JobDep.__table__
    train = sa.alias(JOBS, "train")
    sweep_of = (
        sa.select(deps.c.job_id, train.c.config)
        .join(train, train.c.id == deps.c.depends_on)
        .where(train.c.kind == "train")
    )
    decode_device = sa.select(DecodeBench.job_id, sa.func.min(DecodeBench.device)).group_by(
        DecodeBench.job_id
    )
    with eng.connect() as conn:
        rows = conn.execute(query).all()
        train_spec = {job_id: config for job_id, config in conn.execute(sweep_of).all()}
        decode_on = dict(conn.execute(decode_device).all())
    out = []
    for r in rows:
        try:
            spec = json.loads(r.config)
        except ValueError:
            continue
        wall = float(r.ended_at - r.started_at)
        item: dict[str, Any] = {"job_id": r.id, "kind": r.kind, "variant_id": r.variant_id, "spec": spec,
                                "wall": wall, "device": _device_type(r.device or decode_on.get(r.id))}  # fmt: skip
        if r.kind == "train":
            worked = sum(x or 0.0 for x in (r.train_seconds, r.eval_seconds, r.ckpt_seconds))
            item.update(
                steps=r.steps or 1, tokens_per_s=r.tokens_per_s, eval_seconds=r.eval_seconds,
                ckpt_seconds=r.ckpt_seconds, peak_mem_mb=r.peak_mem_mb, overhead=max(0.0, wall - worked),
                batch_size=spec.get("batch_size"), compile=bool(spec.get("compile")),
            )  # fmt: skip
            if r.train_seconds is None:
                continue
        if r.kind == "depth_sweep":
            variant = _variant(json.loads(train_spec[r.id])) if r.id in train_spec else None
            item.update(train_spec=json.loads(train_spec[r.id]) if r.id in train_spec else None)
            item["variant_id"] = r.variant_id or variant
        out.append(item)
    return out


# ---------------------------------------------------------------- the queue as jobs to place


@dataclass
class PlannedJob:
    """One row of a plan: a job of the queue (`job_id`) or of the grids (`job_id` None, `index` its
    plan index), with its estimate and, after `schedule`, when it starts and ends (seconds from now)."""

    key: str  # "#12" for a job of the database, "+3" for the grids' fourth plan
    kind: str
    what: str  # recipe / variant label, size, seed
    status: str  # new | queued | running | present (the grids' job is already in the database)
    estimate: Estimate
    priority: int = 0
    order: int = 0  # the scheduler's tie-break after priority (the job id)
    deps: list[str] = field(default_factory=list)
    cpus: float = 1.0
    gpus: float = 0.0
    exclusive: bool = False
    remaining_s: float | None = None  # what is left to run (a running job: less than the estimate)
    job_id: int | None = None
    fits: bool | None = None
    device_memory: float | None = None
    start_s: float | None = None
    end_s: float | None = None
    device: str = ""  # where the simulation placed it: "cpu" or "gpu0", "gpu1", ...


def _describe(kind: str, spec: dict[str, Any], label: str | None = None) -> str:
    name = label or spec.get("recipe") or ""
    parts = [str(name), str(spec.get("size") or "")]
    if kind == "train" and spec.get("seed") is not None:
        parts.append(f"seed {spec['seed']}")
    return " ".join(p for p in parts if p)


def local_slots(num_cpus: float | None = None, num_gpus: float | None = None) -> tuple[float, float]:
    """(CPUs, GPUs) the queue will have, as a local `looplab run` gets them: the flags, else the machine."""
    cpus = float(num_cpus) if num_cpus is not None else float(os.cpu_count() or 1)
    if num_gpus is None:
        try:
            import torch

            num_gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except Exception:  # noqa: BLE001 - no usable torch: no GPU
            num_gpus = 0
    return cpus, float(num_gpus)


def device_memory(device: str) -> float | None:
    """Bytes of memory of the device jobs run on: GPU 0's, or the machine's RAM."""
    if device == "cuda":
        try:
            import torch

            return float(torch.cuda.get_device_properties(0).total_memory)
        except Exception:  # noqa: BLE001 - no GPU here: nothing to compare with
            return None
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def queue_jobs(eng: Engine, estimator: Estimator, has_gpu: bool, now: float) -> list[PlannedJob]:
    """The queue's queued and running jobs as PlannedJobs (the stored plan estimate when there is one,
    else a fresh one; a running job for what is left: its progress ETA, else estimate less elapsed)."""
    from orchestrator.jobqueue import job_resources

    deps = JobDep.__table__
    dep = sa.alias(JOBS, "dep")
    with eng.connect() as conn:
        rows = conn.execute(
            sa.select(JOBS)
            .where(JOBS.c.status.in_((JobStatus.QUEUED, JobStatus.RUNNING)))
            .order_by(JOBS.c.id)
        ).all()
        links = conn.execute(
            sa.select(deps.c.job_id, deps.c.depends_on, dep.c.status, dep.c.config, dep.c.kind)
            .join(dep, dep.c.id == deps.c.depends_on)
            .where(deps.c.job_id.in_([r.id for r in rows]))
        ).all()  # fmt: skip
    waiting: dict[int, list[Any]] = {}
    for link in links:
        waiting.setdefault(link.job_id, []).append(link)
    out = []
    for r in rows:
        my_deps = waiting.get(r.id, [])
        if any(d.status in (JobStatus.FAILED, JobStatus.CANCELLED) for d in my_deps):
            continue  # the cascade fails it: it will not run
        spec = json.loads(r.config)
        train_spec = next((json.loads(d.config) for d in my_deps if d.kind == "train"), None)
        if r.planned_seconds is not None:  # what was planned at submission
            est = Estimate(r.planned_seconds, r.planned_source or "unknown")
        else:
            est = estimator.estimate(r.kind, spec, train_spec=train_spec, ref_train_s=r.budget_time_s)
        res = job_resources(r.kind, r.resources, has_gpu)
        job = PlannedJob(
            key=f"#{r.id}", kind=r.kind, status=r.status,
            what=_describe("train", train_spec, r.variant_label) if train_spec else _describe(r.kind, spec, r.variant_label),
            estimate=est, priority=r.priority, order=r.id, cpus=res["num_cpus"], gpus=res["num_gpus"],
            exclusive=res["exclusive"], job_id=r.id, remaining_s=est.seconds,
            deps=[f"#{d.depends_on}" for d in my_deps if d.status != JobStatus.SUCCEEDED],
        )  # fmt: skip
        if r.status == JobStatus.RUNNING:
            elapsed = now - (r.started_at or now)
            left = [] if est.seconds is None else [max(0.0, est.seconds - elapsed)]
            if r.eta_s is not None and r.eta_s == r.eta_s:
                left = [float(r.eta_s)]
            job.remaining_s = left[0] if left else None
        out.append(job)
    return out


def schedule(jobs: list[PlannedJob], cpus: float, gpus: float, start_s: float = 0.0) -> float:
    """Replay the scheduler's policy on the estimates: fills start_s/end_s/device of every job and
    returns the makespan in seconds. A job without an estimate counts as taking no time (the
    finish time is then a lower bound); one that can never fit the node is left unscheduled.
    `start_s`: when the first queued job can start (a driver still to be started).

    Worker processes: Ray keeps a finished task's worker process and gives it the next task, so only a
    job that starts while every worker so far is busy pays its estimate's `startup_s`; the others
    start warm (the plan_bench benchmark measured ~4 s of a tiny CPU job's ~8 s as that start-up)."""
    by_key = {j.key: j for j in jobs}
    pending = sorted(jobs, key=lambda j: (j.status != JobStatus.RUNNING, -j.priority, j.order))
    done: set[str] = set()
    running: list[PlannedJob] = []
    gpu_free = [1.0] * int(math.ceil(gpus))
    now = 0.0

    def free_cpus() -> float:
        return cpus - sum(j.cpus for j in running)

    def place_gpu(job: PlannedJob) -> str | None:
        need = job.gpus
        if need <= 0:
            return "cpu"
        if need >= 1:
            whole = [i for i, f in enumerate(gpu_free) if f >= 1 - 1e-9][: int(math.ceil(need))]
            if len(whole) < math.ceil(need):
                return None
            for i in whole:
                gpu_free[i] = 0.0
            return ",".join(f"gpu{i}" for i in whole)
        for i, f in enumerate(gpu_free):
            if f >= need - 1e-9:
                gpu_free[i] -= need
                return f"gpu{i}"
        return None

    workers = 0  # worker processes started so far (busy or idle)

    def start(job: PlannedJob, at: float) -> None:
        nonlocal workers
        cold = len(running) >= workers
        workers += cold
        warm_cut = 0.0
        if not cold and job.status != JobStatus.RUNNING and job.estimate is not None:
            warm_cut = job.estimate.startup_s
        job.start_s = at
        job.end_s = at + max(0.0, (job.remaining_s or 0.0) - warm_cut)
        running.append(job)

    for job in [j for j in pending if j.status == JobStatus.RUNNING]:  # already placed by the driver
        job.device = place_gpu(job) or "gpu?"
        start(job, 0.0)
    queued = [j for j in pending if j.status != JobStatus.RUNNING]
    never = [j for j in queued if j.cpus > cpus + 1e-9 or j.gpus > gpus + 1e-9]
    queued = [j for j in queued if j not in never]
    now = start_s
    while queued or running:
        waiting: int | None = None  # priority of an exclusive job waiting for the node to empty
        # reservations, as the scheduler makes them: a job that does not fit holds what it asks for
        # against jobs of lower priority (they may only use what is left beside it)
        pool = {"cpus": free_cpus(), "gpus": sum(gpu_free)}
        level, reserve = None, []
        for job in list(queued):
            if any(d in by_key and d not in done for d in job.deps):
                continue
            if any(r.exclusive for r in running):
                break  # nothing starts beside an exclusive job
            if waiting is not None and job.priority < waiting:
                break  # the node drains for the waiting exclusive job
            if level is not None and job.priority < level:
                for wanted in reserve:
                    pool = {k: max(0.0, pool[k] - wanted[k]) for k in pool}
                reserve = []
            level = job.priority
            if job.exclusive and running:
                waiting = job.priority if waiting is None else waiting
                continue
            wants = {"cpus": job.cpus, "gpus": job.gpus}
            if any(wants[k] > pool[k] + 1e-9 for k in pool):
                reserve.append(wants)
                continue
            device = place_gpu(job)
            if device is None:
                reserve.append(wants)
                continue
            pool = {k: pool[k] - wants[k] for k in pool}
            job.device = device
            queued.remove(job)
            start(job, now)
            if job.exclusive:
                break
        if not running:
            break  # what is left waits on jobs that never run
        first = min(running, key=lambda j: j.end_s)
        now = first.end_s
        for job in [j for j in running if j.end_s <= now + 1e-9]:
            running.remove(job)
            done.add(job.key)
            if job.gpus > 0 and job.device.startswith("gpu") and "?" not in job.device:
                for name in job.device.split(","):
                    i = int(name[3:])
                    gpu_free[i] = min(1.0, gpu_free[i] + (job.gpus if job.gpus < 1 else 1.0))
    return max([j.end_s for j in jobs if j.end_s is not None], default=0.0)


# ---------------------------------------------------------------- plans of grids


@dataclass
class PlanReport:
    """Every job with its estimate, start and end; totals per device and overall; the finish time."""

    jobs: list[PlannedJob]
    cpus: float
    gpus: float
    makespan_s: float
    now: float
    calibration: Calibration | None = None
    driver_start_s: float = 0.0  # included in makespan_s: the queue's start-up before the first job

    @property
    def finish_at(self) -> float:
        return self.now + self.makespan_s

    def new_jobs(self) -> list[PlannedJob]:
        return [j for j in self.jobs if j.status in ("new", "present")]

    def totals(self) -> dict[str, float]:
        """Busy seconds per device (cpu, gpu0, ...) of the jobs still to run, and `all`."""
        out: dict[str, float] = {}
        for job in self.jobs:
            if job.status == "present" or job.remaining_s is None:
                continue
            for device in (job.device or "cpu").split(","):
                out[device] = out.get(device, 0.0) + job.remaining_s
        out["all"] = sum(j.remaining_s or 0.0 for j in self.jobs if j.status != "present")
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
                    "device": j.device,
                    "start_s": j.start_s,
                    "end_s": j.end_s,
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
        unknown = [j for j in self.jobs if j.status != "present" and j.remaining_s is None]
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


def plan_grids(eng: Engine, grids: list[Grid], kinds: JobRegistry, *, num_cpus: float | None = None,
               num_gpus: float | None = None, calibration: Calibration | None | str = "auto",
               device_memory_bytes: float | None = None, now: float | None = None) -> PlanReport:  # fmt: skip
    """The plan of `grids` behind the current queue. `calibration`: "auto" (the cached one, else
    measure now and cache it), "cached" (never measure), "fresh" (measure now), a Calibration, or
    None (no FLOP model).
    Validates the grids as `submit` does (ConfigError) and writes nothing."""
    from orchestrator.grid import trained_plan
    from orchestrator.jobqueue import job_resources, plan_ids_and_hashes

    now = time.time() if now is None else now
    cpus, gpus = local_slots(num_cpus, num_gpus)
    device = "cuda" if gpus > 0 else "cpu"
    cal = _calibration(calibration, device)
    estimator = Estimator(eng, cal, device)
    plans, existing = plan_ids_and_hashes(eng, grids, kinds)
    jobs = queue_jobs(eng, estimator, gpus > 0, now)
    queued_ids = {j.job_id for j in jobs}
    estimates = estimate_plans(estimator, plans, existing_train_s=_existing_train_seconds(eng, plans))
    memory = device_memory_bytes if device_memory_bytes is not None else device_memory(device)
    next_id = _max_job_id(eng) + 1
    keys: list[str] = []
    for i, plan in enumerate(plans):
        known = existing.get(plan.config_hash)
        keys.append(f"#{known}" if known is not None else f"+{i}")
    from orchestrator.jobqueue import deps_first

    rank = {i: n for n, i in enumerate(deps_first(plans))}
    seen: set[str] = set()
    for i, plan in enumerate(plans):
        known = existing.get(plan.config_hash)
        if (known is not None and known in queued_ids) or plan.config_hash in seen:
            continue  # already in the queue above, or the same job as an earlier plan (one decode bench)
        seen.add(plan.config_hash)
        about = trained_plan(plans, i) or plan
        res = job_resources(plan.kind, plan.resources, gpus > 0, exclusive_default=_iso_member(plans, i))
        est = estimates[i]
        job = PlannedJob(
            key=keys[i], kind=plan.kind, what=_describe(about.kind, about.spec, about.label),
            status="present" if known is not None else "new", estimate=est, priority=plan.priority,
            order=next_id + rank[i], deps=[keys[d] for d in plan.deps] + [f"#{j}" for j in plan.dep_ids],
            cpus=res["num_cpus"], gpus=res["num_gpus"], exclusive=res["exclusive"], job_id=known,
            remaining_s=None if known is not None else est.seconds,
        )  # fmt: skip
        share = res["num_gpus"] if device == "cuda" and res["num_gpus"] > 0 else 1.0
        if memory is not None and est.peak_mem_bytes is not None:
            job.device_memory = memory * min(1.0, share)
            job.fits = est.peak_mem_bytes <= job.device_memory
        jobs.append(job)
    to_place = [j for j in jobs if j.status != "present"]
    # no job runs: no driver is up, and `looplab run` spends its start-up before the first job
    driver_start = (
        0.0 if cal is None or any(j.status == JobStatus.RUNNING for j in jobs) else cal.driver_start_s
    )
    makespan = schedule(to_place, cpus, gpus, start_s=driver_start)
    return PlanReport(jobs, cpus, gpus, makespan, now, cal, driver_start)


def _calibration(calibration: Calibration | None | str, device: str) -> Calibration | None:
    if calibration == "auto":
        return cached_calibration(device) or calibrate(device)
    if calibration == "cached":
        return cached_calibration(device)
    if calibration == "fresh":
        return calibrate(device)
    if calibration is None or isinstance(calibration, Calibration):
        return calibration
    raise ValueError(
        f"calibration: expected 'auto', 'cached', 'fresh', a Calibration or None, got {calibration!r}"
    )


def _iso_member(plans: list[JobPlan], i: int) -> bool:
    """Whether plan i is a train job of an iso-time pair: it has a `match_time_of` budget, or such a
    budget of this submission names it."""
    plan = plans[i]
    if plan.kind != "train":
        return False
    if plan.budget and "match_time_of" in plan.budget:
        return True
    return any(p.budget and "match_time_of" in p.budget and i in p.deps for p in plans)


def _existing_train_seconds(eng: Engine, plans: list[JobPlan]) -> dict[int, float]:
    """Training seconds of the existing jobs that `match_time_of` budgets of the plans name by id."""
    ids = sorted({j for p in plans for j in p.dep_ids})
    if not ids:
        return {}
    with eng.connect() as conn:
        rows = conn.execute(
            sa.select(TrainResult.job_id, TrainResult.train_seconds).where(TrainResult.job_id.in_(ids))
        ).all()
    return {job_id: float(s) for job_id, s in rows if s is not None}


def _max_job_id(eng: Engine) -> int:
    with eng.connect() as conn:
        return int(conn.execute(sa.select(sa.func.max(JOBS.c.id))).scalar() or 0)


def estimate_plans(estimator: Estimator, plans: list[JobPlan],
                   existing_train_s: dict[int, float] | None = None) -> list[Estimate]:  # fmt: skip
    """One estimate per plan, references before the jobs whose budget copies their training time."""
    from orchestrator.grid import trained_plan
    from orchestrator.jobqueue import deps_first

    existing_train_s = existing_train_s or {}
    out: dict[int, Estimate] = {}
    for i in deps_first(plans):
        plan = plans[i]
        ref_train_s = None
        if plan.budget and "match_time_of" in plan.budget:
            if plan.dep_ids:
                ref_train_s = existing_train_s.get(plan.dep_ids[-1])
            elif plan.deps:
                ref_train_s = out[plan.deps[-1]].train_s
        trained = trained_plan(plans, i)
        train_spec = None if trained is None else trained.spec
        try:
            out[i] = estimator.estimate(plan.kind, plan.spec, train_spec=train_spec, ref_train_s=ref_train_s)
        except (ValueError, TypeError, KeyError, ZeroDivisionError):  # a spec the FLOP model cannot read
            out[i] = Estimate(None, "unknown")
    return [out[i] for i in range(len(plans))]


def submission_estimates(eng: Engine, plans: list[JobPlan]) -> list[tuple[float | None, str | None]]:
    """What `jobqueue.submit` stores as (planned_seconds, planned_source) per plan: the database's
    throughputs, else the FLOP model with a calibration already cached (never measured here)."""
    _, gpus = local_slots(num_cpus=1)
    device = "cuda" if gpus > 0 else "cpu"
    estimator = Estimator(eng, cached_calibration(device), device)
    return [
        (e.seconds, e.source) for e in estimate_plans(estimator, plans, _existing_train_seconds(eng, plans))
    ]


def forecast_queue(eng: Engine, *, num_cpus: float | None = None, num_gpus: float | None = None,
                   now: float | None = None) -> PlanReport:  # fmt: skip
    """The current queue's finish time (`looplab status`): stored plan estimates, else fresh ones
    with the cached calibration (never measured here)."""
    now = time.time() if now is None else now
    cpus, gpus = local_slots(num_cpus, num_gpus)
    device = "cuda" if gpus > 0 else "cpu"
    estimator = _LazyEstimator(eng, device)
    jobs = queue_jobs(eng, estimator, gpus > 0, now)  # type: ignore[arg-type]
    makespan = schedule(jobs, cpus, gpus)
    return PlanReport(jobs, cpus, gpus, makespan, now, None)


class _LazyEstimator:
    """An Estimator built on first use: a queue whose jobs all carry stored estimates needs no model
    code (and no torch import) to forecast."""

    def __init__(self, eng: Engine, device: str) -> None:
        self.eng, self.device, self._inner = eng, device, None

    def estimate(self, *args: Any, **kwargs: Any) -> Estimate:
        if self._inner is None:
            self._inner = Estimator(self.eng, cached_calibration(self.device), self.device)
        try:
            return self._inner.estimate(*args, **kwargs)
        except (ValueError, TypeError, KeyError, ZeroDivisionError):
            return Estimate(None, "unknown")


# ---------------------------------------------------------------- planned against actual


def planned_vs_actual(eng: Engine) -> pd.DataFrame:
    """Finished jobs with a stored plan estimate: planned and actual wall seconds (the attempts' sum),
    their ratio, the estimate's source and the contention the job ran under."""
    import pandas as pd

    attempts = Attempt.__table__
    wall = (
        sa.select(attempts.c.job_id, sa.func.sum(attempts.c.ended_at - attempts.c.started_at).label("actual"))
        .where(attempts.c.ended_at.is_not(None))
        .group_by(attempts.c.job_id)
        .subquery()
    )
    results = TrainResult.__table__
    contention = (
        sa.select(DecodeBench.job_id, sa.func.max(DecodeBench.concurrent_jobs).label("concurrent"))
        .group_by(DecodeBench.job_id)
        .subquery()
    )
    query = (
        sa.select(
            JOBS.c.id.label("job_id"),
            GridRow.name.label("grid"),
            JOBS.c.kind,
            JOBS.c.variant_label,
            JOBS.c.size,
            JOBS.c.seed,
            JOBS.c.status,
            JOBS.c.planned_source.label("source"),
            JOBS.c.planned_seconds,
            wall.c.actual.label("actual_seconds"),
            sa.func.coalesce(results.c.concurrent_jobs, contention.c.concurrent).label("concurrent_jobs"),
        )  # fmt: skip
        .join(wall, wall.c.job_id == JOBS.c.id)
        .outerjoin(GridRow, GridRow.id == JOBS.c.grid_id)
        .outerjoin(results, results.c.job_id == JOBS.c.id)
        .outerjoin(contention, contention.c.job_id == JOBS.c.id)
        .where(JOBS.c.planned_seconds.is_not(None), JOBS.c.status == JobStatus.SUCCEEDED)
        .order_by(JOBS.c.id)
    )
    with eng.connect() as conn:
        df = pd.DataFrame(conn.execute(query).all(), columns=[c.name for c in query.selected_columns])
    df["ratio"] = df["actual_seconds"] / df["planned_seconds"]
    return df
