"""What a machine's device achieves, measured for the planner's FLOP model (`measure`), and the calibration
file that carries it to another machine (`Calibration.write`, `read_file`); a device the table of
workers/device.py lists can be priced without one (`for_device`: its peak FLOP/s times an MFU).

Run it on the box a study will run on; it needs only torch there (no Ray, no database driver):

    python -m looplab.workers.calibrate --out h200.json        # or: looplab calibrate --out h200.json
    looplab plan grid.py --calibration h200.json       # then, on any machine

What is measured, each after untimed warm-up calls (about 15 s on a CPU core, a minute on a GPU):
- forward+backward FLOP/s and forward FLOP/s without autograd at several widths (on the CPU the tiny
  and small `lean` models; on CUDA the 20-layer iso-depth model at the 144m size's vocabulary and
  sequence at widths 256 to 2048, those whose training memory fits the device), under bf16 autocast on
  CUDA as the trainer runs; the planner interpolates between the widths;
- the step of each optimizer per parameter (on the widest model), one decode step's fixed cost per layer
  application (the tiny model: what a step costs besides its FLOPs and bytes), the memory bandwidth (a
  large on-device copy), the checkpoint write rate (`workers.checkpoint.save` of 1 GiB of tensors, fsync
  included), and a job's start-up (a fresh Python that imports torch and builds a model).

The file is JSON: {"format": "looplab-calibration", "version": 3, "device": {...}, "rates": {...}, ...}
(`FIELDS` lists every key); reading one refuses another format or version, an unknown or missing key
and a bad value, naming the key. The planner's cache of this machine (lab/planner/
calibration.py) stores the same entries.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError

FORMAT = "looplab-calibration"
VERSION = 3  # 3: device facts, bandwidth, the file; 2: forward rate, optimizer step; older: measured again
DEFAULT_STARTUP_S = 5.0  # a job's start-up when nothing measured it
# what a device of the table is priced with besides its datasheet (`for_device`): a model-FLOPs utilisation
# typical of training a ~100M-1B-parameter transformer in bf16 with PyTorch (the user states their own
# with --mfu), and a local NVMe's write rate for checkpoints
DEFAULT_MFU = 0.35
DEFAULT_SAVE_BYTES_PER_S = 1e9
CPUS_PER_GPU = 8  # a table device's box: CPUs per GPU (the jobs ask one each by default)
# CUDA: the widths measured (each at the 144m size's vocabulary and sequence: the study's shapes)
CUDA_WIDTHS = (256, 512, 1024, 2048)
CUDA_BATCH = 8
CUDA_MEMORY_SHARE = 0.7  # a width is measured when its training memory fits this share of the device's


@dataclass(frozen=True)
class Calibration:
    """What a machine achieves: FLOP/s of a forward+backward (rounds with autograd) and of a forward
    without autograd (evaluations, and the gradient-free rounds of parcae-like recipes, which run at
    another rate), the optimizer's step time per parameter (per optimizer), the fixed cost of one layer
    application in a decode step, the memory bandwidth, checkpoint bytes written per second, a job's
    start-up and the queue's (a driver starting Ray), and the device it ran on. `load`: the machine's
    1-minute load average per CPU when it was measured (above 1, other processes competed and the rates
    are too low). `mfu` is set when the rates are a table device's peak times it (`for_device`)."""

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
    device_name: str = ""  # torch.cuda.get_device_name, or the CPU's
    device_memory_bytes: float | None = None  # of one device (the machine's RAM on the CPU)
    device_count: int = 1  # GPUs on the machine (1 on the CPU)
    cpus: int | None = None  # the machine's CPUs
    memory_bandwidth: float | None = None  # bytes per second (a copy: bytes read + written / time)
    torch_version: str = ""
    mfu: float | None = None  # set for a device of the table: the rates are its peak times this

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

    def describe(self) -> str:
        """One line: the device and where the rates come from."""
        name = self.device_name or self.device
        if self.mfu is not None:
            return (
                f"{name} by the device table: {self.flops_per_s / self.mfu / 1e12:,.1f} TFLOP/s peak x "
                f"MFU {self.mfu:g}, {_gb(self.device_memory_bytes)}, "
                f"{(self.memory_bandwidth or 0) / 1e9:,.0f} GB/s"
            )
        top = max(r[1] for r in self.width_rates) if self.width_rates else self.flops_per_s
        when = time.strftime("%Y-%m-%d", time.localtime(self.measured_at)) if self.measured_at else "?"
        return (
            f"{name} measured on {self.host or '?'} {when}: up to {top / 1e12:,.3g} TFLOP/s training, "
            f"{_gb(self.device_memory_bytes)}"
        )

    # ---- the file
    def to_file(self) -> dict[str, Any]:
        """The calibration as the file holds it (`FIELDS`: sections and keys)."""
        out: dict[str, Any] = {"format": FORMAT, "version": VERSION}
        for section, key, attr, _, _ in FIELDS:
            value = getattr(self, attr)
            (out.setdefault(section, {}) if section else out)[key] = value
        return out

    def write(self, path: str | Path) -> Path:
        """Write the calibration file (temp file + rename: never a torn file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.to_file(), indent=1) + "\n")
        os.replace(tmp, path)
        return path

    @classmethod
    def from_file(cls, data: Any, where: str = "calibration") -> Calibration:
        """A calibration from the file's dict; ConfigError naming `where` and the key on a bad one."""
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}")
        if data.get("format") != FORMAT:
            raise ConfigError(f"{where}: format: expected {FORMAT!r}, got {data.get('format')!r}")
        if data.get("version") != VERSION:
            raise ConfigError(
                f"{where}: version: unknown {data.get('version')!r}; accepted: {VERSION} (measure the device "
                "again: looplab calibrate --out FILE)"
            )
        sections = {s for s, *_ in FIELDS if s}
        tops = {"format", "version"} | sections | {k for s, k, *_ in FIELDS if not s}
        _known(where, data, tops)
        for section in sections:
            if section in data:
                _known(f"{where}: {section}", data[section], {k for s, k, *_ in FIELDS if s == section})
        values = {}
        for section, key, attr, parse, required in FIELDS:
            holder = data.get(section, {}) if section else data
            name = f"{where}: {section + '.' if section else ''}{key}"
            if key not in holder or (holder[key] is None and required):
                if required:
                    raise ConfigError(f"{name}: missing")
                continue
            values[attr] = parse(name, holder[key])
        return cls(**values)


def _known(where: str, d: Any, names: set[str]) -> None:
    fields.known_keys(where, d, sorted(names))


def _positive(name: str, v: Any) -> float:
    return fields.number(name, v, lo=0, lo_open=True)


def _non_negative(name: str, v: Any) -> float | None:
    return fields.number(name, v, lo=0, allow_none=True)


def _positive_or_none(name: str, v: Any) -> float | None:
    return fields.number(name, v, lo=0, lo_open=True, allow_none=True)


def _count(name: str, v: Any) -> int | None:
    return fields.integer(name, v, lo=1, allow_none=True)


def _text(name: str, v: Any) -> str:
    if not isinstance(v, str):
        raise ConfigError(f"{name}: expected a string, got {v!r}")
    return v


def _device_type(name: str, v: Any) -> str:
    return fields.choice(name, v, ("cpu", "cuda"))


def _width_rates(name: str, v: Any) -> list[list[float]] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not v:
        raise ConfigError(f"{name}: expected a non-empty list of [d_model, training FLOP/s, forward FLOP/s]")
    out = []
    for i, row in enumerate(v):
        if not isinstance(row, list) or len(row) != 3:
            raise ConfigError(
                f"{name}[{i}]: expected [d_model, training FLOP/s, forward FLOP/s], got {row!r}"
            )
        out.append(
            [
                fields.integer(f"{name}[{i}][0]", row[0], lo=1),
                _positive(f"{name}[{i}][1]", row[1]),
                _positive_or_none(f"{name}[{i}][2]", row[2]),
            ]
        )
    return out


def _per_optimizer(name: str, v: Any) -> dict[str, float] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise ConfigError(f"{name}: expected a mapping of optimizer -> seconds per step per parameter")
    return {str(k): float(fields.number(f"{name}.{k}", x, lo=0)) for k, x in v.items()}


# (section or "" for the top level, key in the file, Calibration attribute, parser, required)
FIELDS: tuple[tuple[str, str, str, Callable[[str, Any], Any], bool], ...] = (
    ("", "host", "host", _text, False),
    ("", "measured_at", "measured_at", lambda n, v: fields.number(n, v, lo=0), False),
    ("", "torch", "torch_version", _text, False),
    ("", "load", "load", _non_negative, False),
    ("", "mfu", "mfu", lambda n, v: fields.number(n, v, lo=0, lo_open=True, hi=1, allow_none=True), False),
    ("device", "type", "device", _device_type, True),
    ("device", "name", "device_name", _text, False),
    ("device", "memory_bytes", "device_memory_bytes", _positive_or_none, False),
    ("device", "count", "device_count", lambda n, v: fields.integer(n, v, lo=1), False),
    ("device", "cpus", "cpus", _count, False),
    ("device", "threads", "threads", lambda n, v: fields.integer(n, v, lo=1), False),
    ("rates", "train_flops_per_s", "flops_per_s", _positive, True),
    ("rates", "forward_flops_per_s", "forward_flops_per_s", _positive_or_none, False),
    ("rates", "width_rates", "width_rates", _width_rates, False),
    ("rates", "decode_layer_s", "decode_layer_s", lambda n, v: fields.number(n, v, lo=0), True),
    ("rates", "memory_bandwidth", "memory_bandwidth", _positive_or_none, False),
    ("rates", "optimizer_s_per_param", "opt_s_per_param", _per_optimizer, False),
    ("rates", "checkpoint_bytes_per_s", "save_bytes_per_s", _positive, True),
    ("rates", "startup_s", "startup_s", lambda n, v: fields.number(n, v, lo=0), True),
    ("rates", "driver_start_s", "driver_start_s", lambda n, v: fields.number(n, v, lo=0), False),
)
assert {a for _, _, a, _, _ in FIELDS} == {f.name for f in dataclasses.fields(Calibration)}, (
    "FIELDS misses a field"
)


def read_file(path: str | Path, name: str = "--calibration") -> Calibration:
    """The calibration file at `path`; a ConfigError naming `name`, the file and the bad key."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"{name}: cannot read {str(path)!r} ({e.strerror or e})") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{name}: {str(path)!r} is not JSON ({e})") from None
    return Calibration.from_file(data, f"{name} {path}")


def for_device(key: str, mfu: float | None = None, count: int = 1) -> Calibration:
    """A device of the table (workers/device.py `DEVICES`) priced without a measurement: training and
    forwards at its peak bf16 FLOP/s times `mfu` (default DEFAULT_MFU), decode steps bounded by its
    memory bandwidth, no fixed per-layer cost and no separate optimizer time (the MFU covers them),
    checkpoints at DEFAULT_SAVE_BYTES_PER_S, start-up DEFAULT_STARTUP_S; `count` GPUs."""
    from looplab.workers.device import device_spec

    spec = device_spec(key)
    mfu = fields.number("--mfu", DEFAULT_MFU if mfu is None else mfu, lo=0, lo_open=True, hi=1)
    count = fields.integer("--num-gpus", count, lo=1)
    rate = spec.peak_flops * mfu
    return Calibration(
        device="cuda",
        flops_per_s=rate,
        decode_layer_s=0.0,
        save_bytes_per_s=DEFAULT_SAVE_BYTES_PER_S,
        startup_s=DEFAULT_STARTUP_S,
        forward_flops_per_s=rate,
        device_name=spec.name,
        device_memory_bytes=spec.memory_bytes,
        device_count=count,
        cpus=CPUS_PER_GPU * count,
        memory_bandwidth=spec.bandwidth,
        mfu=mfu,
    )


# ------------------------------------------------------------------------------------------ measuring


def measure(
    device: str = "cpu",
    threads: int = 1,
    steps: int = 15,
    widths: tuple[int, ...] | None = None,
    startup: bool = True,
) -> Calibration:
    """Measure this machine's `device` ("cpu" or "cuda"; see the module docstring): `steps` timed calls
    of each thing after three untimed ones, on the CPU with `threads` torch threads (a job gets as many
    as its num_cpus). `widths`: on CUDA the widths to measure (default CUDA_WIDTHS, those that fit);
    `startup`: also time a fresh Python's start-up (else DEFAULT_STARTUP_S)."""
    import torch

    from looplab.model.names import Optimizer
    from looplab.workers.train.optim import build_optimizers

    load = os.getloadavg()[0] / (os.cpu_count() or 1) if hasattr(os, "getloadavg") else None
    dev = torch.device(fields.choice("device", device, ("cpu", "cuda")))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: 'cuda' requested but CUDA is not available")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    old_threads = torch.get_num_threads()
    if dev.type == "cpu":
        torch.set_num_threads(threads)
    try:
        timed = _timer(sync, steps)
        model, width_rates = _width_rates(dev, _width_configs(dev, widths), timed)
        n_params = sum(p.numel() for p in model.parameters())
        opt_s_per_param, opts = {}, []
        # the gradients of the widest model's last backward are still in place
        for name in map(str, Optimizer):
            opts = build_optimizers(model, name, None, None, None)
            opt_s_per_param[name] = timed(lambda opts=opts: [o.step() for o in opts]) / n_params

        del model, opts
        save_bytes_per_s = _save_rate(dev)
        decode_layer_s = _decode_layer_seconds(dev, sync)
        bandwidth = _bandwidth(dev, sync, steps)
        name, memory, count = _device_facts(dev)
    finally:
        torch.set_num_threads(old_threads)
    startup_s = (subprocess_seconds(_JOB_START) if startup else None) or DEFAULT_STARTUP_S
    tiny = width_rates[0]
    return Calibration(
        device=dev.type,
        flops_per_s=tiny[1],
        decode_layer_s=decode_layer_s,
        save_bytes_per_s=save_bytes_per_s,
        startup_s=startup_s,
        threads=threads,
        host=socket.gethostname(),
        measured_at=time.time(),
        forward_flops_per_s=tiny[2],
        opt_s_per_param=opt_s_per_param,
        load=load,
        width_rates=width_rates,
        device_name=name,
        device_memory_bytes=memory,
        device_count=count,
        cpus=os.cpu_count(),
        memory_bandwidth=bandwidth,
        torch_version=torch.__version__,
    )


def _timer(sync: Callable[[], None], steps: int) -> Callable[[Callable[[], None]], float]:
    """Seconds per call of a function: `steps` timed calls after three untimed ones (allocation,
    first-call costs), the device synchronised around the timed ones."""

    def timed(fn: Callable[[], None]) -> float:
        for _ in range(3):
            fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        sync()
        return (time.perf_counter() - t0) / steps

    return timed


def _width_rates(dev, configs: list[tuple[Any, int]], timed) -> tuple[Any, list[list[float]]]:
    """[d_model, training FLOP/s, forward FLOP/s] per width, one model at a time on the device; returns
    the widest model too (the optimizer steps are timed on its gradients)."""
    import torch

    from looplab.model.contract import build_model
    from looplab.model.flops import training_flops
    from looplab.workers.validation import autocast

    def forward(model: torch.nn.Module, x: torch.Tensor, grad: bool) -> None:
        with torch.set_grad_enabled(grad), autocast(dev):
            out = model(x, targets=x)
        if grad:
            out.loss.backward()

    torch.manual_seed(0)
    width_rates, model = [], None
    for cfg, batch in configs:
        del model  # one model at a time on the device
        model = build_model(cfg).module.to(dev)  # the built-in family: a LoopedLM
        x = torch.randint(0, cfg.vocab_size, (batch, cfg.seq_len), device=dev)  # (B, T)
        flops = training_flops(cfg, batch)
        train = flops.total * batch * cfg.seq_len / timed(lambda m=model, x=x: forward(m, x, True))
        fwd = flops.forward * batch * cfg.seq_len / timed(lambda m=model, x=x: forward(m, x, False))
        width_rates.append([cfg.d_model, train, fwd])
    assert model is not None
    return model, width_rates


def _width_configs(dev, widths: tuple[int, ...] | None) -> list[tuple[Any, int]]:
    """(ModelConfig, batch) of each measured width, narrowest first. CPU: the tiny and small `lean`
    models at the tiny one's sequence, batch 8. CUDA: the 20-layer iso-depth model (r = 1) at the 144m
    size's vocabulary and sequence, heads of 128, at each width whose training memory fits."""
    import torch

    from looplab.model.memory import training_memory
    from looplab.model.presets import iso_depth, preset

    if dev.type == "cpu":
        tiny = preset("lean", "tiny")
        return [(tiny, 8), (preset("lean", "small", seq_len=tiny.seq_len), 8)]
    limit = CUDA_MEMORY_SHARE * torch.cuda.get_device_properties(dev).total_memory
    out = []
    for width in widths or CUDA_WIDTHS:
        cfg = iso_depth(1, width, size="144m", head_dim=min(128, width))
        if training_memory(cfg, CUDA_BATCH, "cuda", "adamw") <= limit:
            out.append((cfg, CUDA_BATCH))
    if not out:
        raise ConfigError(f"widths: none of {list(widths or CUDA_WIDTHS)} fits this device's memory")
    return out


def _save_rate(dev) -> float:
    """Bytes per second of a checkpoint write as the trainer makes one (`workers.checkpoint.save`: temp
    file, fsync, rename) of 1 GiB of tensors from CUDA or 64 MiB on the CPU: the disk, not the page cache."""
    import tempfile

    import torch

    from looplab.workers import checkpoint

    n = (2**30 if dev.type == "cuda" else 2**26) // 4
    state = {"model": {"w": torch.ones(n, dtype=torch.float32, device=dev)}}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        checkpoint.save(Path(tmp) / "c.pt", state)
        seconds = time.perf_counter() - t0
        size = (Path(tmp) / "c.pt").stat().st_size
    return size / max(seconds, 1e-6)


def _decode_layer_seconds(dev, sync: Callable[[], None], n_steps: int = 6) -> float:
    """One decode step of the tiny model per layer application (its fixed cost: the FLOPs are nothing)."""
    import torch

    from looplab.model.contract import build_model
    from looplab.model.presets import preset

    cfg = preset("lean", "tiny")
    model = build_model(cfg).module.to(dev).eval()
    context = 32
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
    return (time.perf_counter() - t0) / n_steps / applications


def _bandwidth(dev, sync: Callable[[], None], steps: int) -> float:
    """Bytes per second of a large copy on the device (each element read once and written once): 1 GiB
    on CUDA, 256 MiB on the CPU."""
    import torch

    n = (2**30 if dev.type == "cuda" else 2**28) // 4
    src = torch.ones(n, dtype=torch.float32, device=dev)
    dst = torch.empty_like(src)
    for _ in range(2):
        dst.copy_(src)
    sync()
    t0 = time.perf_counter()
    for _ in range(max(2, steps // 3)):
        dst.copy_(src)
    sync()
    return 2 * 4 * n * max(2, steps // 3) / (time.perf_counter() - t0)


def _device_facts(dev) -> tuple[str, float | None, int]:
    """(name, bytes of memory of one device, devices) of the GPU, or of the CPU and its RAM."""
    import torch

    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        return torch.cuda.get_device_name(dev), float(props.total_memory), torch.cuda.device_count()
    try:
        ram = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        ram = None
    return platform.processor() or platform.machine() or "cpu", ram, 1


# a job's start-up: torch and looplab's model imported by their installed names (the old top-level
# `model` exists only in a checkout, so installed the measurement failed and fell back to the default),
# the model built as a job builds it, through the contract
_JOB_START = (
    "import torch; from looplab.model.contract import build_model; from looplab.model.presets import preset; "
    "build_model(preset('lean'))"
)


def subprocess_seconds(code: str) -> float | None:
    """Wall time of a fresh Python running `code` in the repository (a start-up), None when it fails."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a new local Ray, not a running one
    t0 = time.perf_counter()
    try:
        subprocess.run(
            [sys.executable, "-c", code],
            check=True,
            capture_output=True,
            timeout=120,
            cwd=str(Path(__file__).resolve().parents[1]),
            env=env,
        )
    except (OSError, subprocess.SubprocessError) as e:  # said: a silent None became a default start-up
        last = (getattr(e, "stderr", None) or b"").decode(errors="replace").strip().rpartition("\n")[2]
        warnings.warn(
            f"start-up probe failed ({type(e).__name__}{': ' + last if last else ''})", stacklevel=2
        )
        return None
    return time.perf_counter() - t0


def _gb(n: float | None) -> str:
    return "? GB" if n is None else f"{n / 1e9:,.0f} GB"


# ----------------------------------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of `python -m looplab.workers.calibrate` and `looplab calibrate` (one definition for both)."""
    p.add_argument("--out", required=True, metavar="FILE", help="the calibration file to write (JSON)")
    p.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="what to measure (default: cuda when there is one, else cpu)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="timed calls of each measurement (default 15 on the CPU, 10 on CUDA)",
    )
    p.add_argument("--threads", type=int, default=1, help="CPU: torch threads (a job's num_cpus; default 1)")


def cli_calibrate(args: argparse.Namespace) -> int:
    """Measure and write the file; prints what it measured."""
    import torch

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    steps = fields.integer(
        "--steps", args.steps if args.steps is not None else (10 if device == "cuda" else 15), lo=1
    )
    threads = fields.integer("--threads", args.threads, lo=1)
    print(f"calibrating {device} ({steps} timed calls each) ...", flush=True)
    cal = measure(device, threads=threads, steps=steps)
    path = cal.write(args.out)
    for d_model, train, forward in cal.width_rates or []:
        print(
            f"  d_model {int(d_model):>5}: {train / 1e12:8.4g} TFLOP/s training, {forward / 1e12:8.4g} forward"
        )
    print(
        f"  memory bandwidth {(cal.memory_bandwidth or 0) / 1e9:,.1f} GB/s, checkpoints "
        f"{cal.save_bytes_per_s / 1e9:,.2f} GB/s, decode {cal.decode_layer_s * 1e6:,.1f} us per layer, "
        f"start-up {cal.startup_s:.1f} s"
    )
    print(f"{cal.describe()}\nwrote {path} (plan with it anywhere: looplab plan GRIDS --calibration {path})")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m looplab.workers.calibrate", description=__doc__.splitlines()[0]
    )
    add_arguments(p)
    try:
        return cli_calibrate(p.parse_args(argv))
    except ConfigError as e:
        print(f"calibrate: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
