"""Devices and memory for the jobs: the torch side of the `device` spec field, and peak memory.

The spec modules only check a device name as text (model.fields.device, no torch import); the jobs turn
it into a `torch.device` here, when they start.
"""

from __future__ import annotations

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
