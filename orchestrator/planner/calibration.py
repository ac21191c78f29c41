"""What this machine achieves, measured once and cached: the calibration the planner's FLOP model divides
by (`calibrate`, `cached_calibration`). It builds tiny models, times their training and forward passes,
an optimizer step per optimizer, decode steps and a checkpoint write, and starts fresh processes (a job's
start-up, the queue's: Ray); cached per machine, device and thread count in
`$LOOPLAB_CACHE/planner/calibration.json`, measured again after a week (the machine, its load or the
code may have changed) or when its format version changes.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CALIBRATION_FILE = "calibration.json"
CALIBRATION_VERSION = 2  # 2: forward-only rate, optimizer step cost, queue start-up, load; 1 is re-measured
CALIBRATION_MAX_AGE_S = 7 * 24 * 3600.0  # older calibrations are measured again
DEFAULT_STARTUP_S = 5.0  # when neither the database nor a calibration says better


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
                       cwd=str(Path(__file__).resolve().parents[2]), env=env)  # fmt: skip
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


def resolve_calibration(calibration: Calibration | None | str, device: str) -> Calibration | None:
    """`calibration` as plan_grids takes it: "auto" (the cached one, else measure now and cache it),
    "cached" (never measure), "fresh" (measure now), a Calibration, or None (no FLOP model)."""
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
