"""The optimizers a train job chooses by name, declared once.

Pure Python (no torch), so a grid is validated without importing torch; here, below the workers, so
the model's memory accounting (model/memory.py) and the trainer's optimizer factory (workers/optim.py)
read the same names. A member is its plain name, as specs store it.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Optimizer"]


class Optimizer(StrEnum):
    """An optimizer by name: AdamW on every parameter, or one of the Muon variants (orthogonalised
    momentum on the matrices, AdamW on the embeddings and scalars)."""

    PARCAE = "parcae"
    TORCH_MUON = "torch_muon"
    ADAMW = "adamw"
