"""Devices and memory for the jobs: the torch side of the `device` spec field, peak memory, and the
peak FLOP/s that model-FLOPs utilisation (MFU) is measured against.

The spec modules only check a device name as text (model.fields.device, no torch import); the jobs turn
it into a `torch.device` here, when they start.
"""

from __future__ import annotations

import os
import re
import resource

import torch

from model.errors import ConfigError


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
    process's peak resident set size, which cannot be reset (it covers the whole process lifetime)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak_mem(device: torch.device) -> None:
    """Start a new CUDA peak measurement (a no-op on CPU, where ru_maxrss cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


# Dense bf16 tensor-core peak FLOP/s (no sparsity) by the GPU's name, as its vendor states it: a name
# matches an entry when it contains the entry as a whole word ("NVIDIA H100 80GB HBM3" -> H100, while
# "NVIDIA L40S" is not an L4). The first match wins, so more specific entries come first.
PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 756e12),
    ("H100", 989.5e12),
    ("H200", 989.5e12),
    ("A100", 312e12),
    ("L4", 121e12),
    ("RTX 4090", 165e12),
)


def peak_flops_of(name: str) -> float | None:
    """The table's peak FLOP/s for a GPU named `name`, None when the table does not know it."""
    for entry, flops in PEAK_FLOPS:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(entry)}(?![A-Za-z0-9])", name):
            return flops
    return None


def peak_flops(device: torch.device) -> float | None:
    """Peak bf16 FLOP/s of a CUDA device (None on CPU and for GPUs the table does not list)."""
    if device.type != "cuda":
        return None
    return peak_flops_of(torch.cuda.get_device_name(device))
