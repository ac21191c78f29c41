"""Devices and memory for the jobs: the torch side of the `device` spec field, peak memory, and the table
of GPUs (`DEVICES`: peak FLOP/s, memory, bandwidth) that model-FLOPs utilisation (MFU) is measured against
and that the planner prices a device by when it has no calibration of it.

The spec modules only check a device name as text (model.fields.device, no torch import); the jobs turn
it into a `torch.device` here, when they start.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from looplab.model.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    """`auto` → cuda when available, else cpu; a cuda device without CUDA is a ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device: {name!r} requested but CUDA is not available")
    return torch.device(name)


def memory_bytes(device: torch.device) -> float:
    """Bytes of memory a job on `device` has: the GPU's total, or the machine's RAM on the CPU."""
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def peak_mem_mb(device: torch.device) -> float:
    """Peak memory in MiB: allocated CUDA memory since the last `reset_peak_mem`, or on CPU the
    process's peak resident set size, which cannot be reset (it covers the whole process lifetime).

    On Linux the CPU figure is /proc/self/status's VmHWM, the high-water mark of this program's own
    memory: `ru_maxrss` keeps the parent's resident set at fork across exec, so a job started by a
    large process (a test worker, a driver) would report its parent's size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak_mem(device: torch.device) -> None:
    """Start a new CUDA peak measurement (a no-op on CPU, where ru_maxrss cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


@dataclass(frozen=True)
class DeviceSpec:
    """A GPU as its vendor's datasheet states it: what the planner prices a device by when it has no
    calibration measured on one (`looplab plan --device KEY`), and what MFU is measured against."""

    key: str  # the name `looplab plan --device` takes
    # a regular expression matched, as whole words, in torch.cuda.get_device_name(): "NVIDIA H100 80GB
    # HBM3" -> "H100"; "NVIDIA A100-SXM4-40GB" -> "A100.*40GB"
    name: str
    peak_flops: float  # dense bf16 tensor-core FLOP/s with FP32 accumulate (no sparsity)
    memory_bytes: float  # the datasheet's GB x 1e9 (the cards report a little more: conservative)
    bandwidth: float  # memory bandwidth, bytes per second


# The table, from the vendors' datasheets (sparsity figures halved to dense ones). A name matches an entry
# when it contains the entry's `name` as whole words ("NVIDIA L40S" is not an L4, "NVIDIA H100 NVL" not
# an H100 SXM); the first match wins, so the more specific entries come first. A GPU that matches no
# entry has no peak: its MFU is refused (`unknown_peak`), never guessed from a near name.
DEVICES: tuple[DeviceSpec, ...] = (
    # NVIDIA H100 Tensor Core GPU datasheet, H100 NVL: BF16 1,671 TFLOPS with sparsity, 94 GB HBM3, 3.9 TB/s
    DeviceSpec("h100_nvl", "H100 NVL", 835.5e12, 94e9, 3.9e12),
    # same datasheet, H100 PCIe: BF16 1,513 TFLOPS with sparsity, 80 GB HBM2e, 2 TB/s
    DeviceSpec("h100_pcie", "H100 PCIe", 756e12, 80e9, 2.0e12),
    # same datasheet, H100 SXM: BF16 1,979 TFLOPS with sparsity, 80 GB HBM3, 3.35 TB/s
    DeviceSpec("h100", "H100", 989.5e12, 80e9, 3.35e12),
    # NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: BF16 1,979 TFLOPS with sparsity, 141 GB HBM3e, 4.8 TB/s
    DeviceSpec("h200", "H200", 989.5e12, 141e9, 4.8e12),
    # NVIDIA A100 Tensor Core GPU datasheet, A100 40GB (SXM and PCIe): BF16 312 TFLOPS dense, 40 GB HBM2,
    # 1,555 GB/s
    DeviceSpec("a100_40gb", "A100.*40GB", 312e12, 40e9, 1.555e12),
    # same datasheet, A100 80GB SXM: BF16 312 TFLOPS dense, 80 GB HBM2e, 2,039 GB/s (the 80GB PCIe: 1,935)
    DeviceSpec("a100", "A100", 312e12, 80e9, 2.039e12),
    # NVIDIA L40S GPU datasheet: BF16 tensor 362.05 TFLOPS dense (733 with sparsity), 48 GB GDDR6, 864 GB/s
    DeviceSpec("l40s", "L40S", 362.05e12, 48e9, 864e9),
    # NVIDIA L4 Tensor Core GPU datasheet: BF16 242 TFLOPS with sparsity, 24 GB GDDR6, 300 GB/s
    DeviceSpec("l4", "L4", 121e12, 24e9, 300e9),
    # NVIDIA RTX Blackwell GPU architecture whitepaper, GeForce RTX 5090: peak BF16 tensor TFLOPS with FP32
    # accumulate 209.5 dense (419 with sparsity), 32 GB GDDR7, 1,792 GB/s
    DeviceSpec("rtx5090", "RTX 5090", 209.5e12, 32e9, 1.792e12),
    # NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090: peak BF16 tensor TFLOPS with FP32 accumulate
    # 165.2 dense (330.4 with sparsity), 24 GB GDDR6X, 1,008 GB/s
    DeviceSpec("rtx4090", "RTX 4090", 165e12, 24e9, 1.008e12),
)


def device_spec(key: str, name: str = "--device") -> DeviceSpec:
    """The table's entry `key` (h100, h200, a100, rtx5090, ...); a ConfigError naming `name` otherwise."""
    for spec in DEVICES:
        if spec.key == key:
            return spec
    raise ConfigError(f"{name}: unknown device {key!r}; accepted: {', '.join(d.key for d in DEVICES)}")


def spec_of(name: str) -> DeviceSpec | None:
    """The table's entry for a GPU named `name` (torch.cuda.get_device_name), None when it is not listed."""
    for spec in DEVICES:
        if re.search(rf"(?<![A-Za-z0-9]){spec.name}(?![A-Za-z0-9])", name):
            return spec
    return None


def peak_flops_of(name: str) -> float | None:
    """The table's peak FLOP/s for a GPU named `name`, None when the table does not know it."""
    spec = spec_of(name)
    return None if spec is None else spec.peak_flops


def unknown_peak(name: str) -> str:
    """Why MFU cannot be measured on a GPU named `name`, and how to make it measurable."""
    return (
        f"{name!r} has no peak FLOP/s in the device table, so MFU cannot be measured: add a "
        "DeviceSpec(key, name as torch.cuda.get_device_name() shows it, dense bf16 FLOP/s, memory bytes, "
        "bandwidth) from its datasheet to DEVICES in workers/device.py"
    )


def peak_flops(device: torch.device) -> float | None:
    """Peak bf16 FLOP/s of a CUDA device (None on CPU and for GPUs the table does not list)."""
    if device.type != "cuda":
        return None
    return peak_flops_of(torch.cuda.get_device_name(device))


def time_steps(step: Callable[[int], Any], n: int, warmup: int, sync: Callable[[], Any]):
    """Run `step(i)` for i = 0..n-1, each between two `sync()` calls, and return the median, p10 and
    p90 wall time in ms of the steps after the first `warmup`."""
    times = []
    for i in range(n):
        sync()
        t0 = time.perf_counter()
        step(i)
        sync()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(times, n=10, method="inclusive") if len(times) > 1 else [times[0]] * 9
    return statistics.median(times), q[0], q[-1]
