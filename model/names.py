"""Names and definitions that specs and result rows store, declared once below every package that reads
them: pure Python (no torch), so a grid is validated and the analysis reads rows without importing torch.

- `Optimizer`: the optimizers a train job chooses by name (the model's memory accounting in
  model/memory.py and the trainer's factory in workers/train/optim.py read the same names);
- the far-copy split of the depth sweep (workers/validation.py measures it, analysis/far_copy.py and the
  claims read it): `FAR_DEFINITION`, the definition a row's `far_definition` names, and
  `DEFAULT_FAR_DISTANCE`, the lean-recipe note's distance.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ARCH_COLUMNS",
    "BUILTIN_FAMILY",
    "DEFAULT_FAR_DISTANCE",
    "FAR_DEFINITION",
    "LOOPED_ARCH_COLUMNS",
    "Optimizer",
]

# looplab's own model as a family name: a spec that names no family is this one (and stores no
# `family` key, so runs stored before families existed keep their hash).
BUILTIN_FAMILY = "looped"

# The architecture a run stores as columns of `jobs`, named as `model.counts.arch_summary` names them.
# Only looplab's own model has these (NULL for a run of another family: its blocks are its own) ...
LOOPED_ARCH_COLUMNS = (
    "n_prelude",
    "n_recurrent",
    "n_coda",
    "effective_depth",
    "d_model",
    "injection",
    "n_once",
    "n_rec",
)
# ... and every family has its parameter count and training FLOPs per token (its own, or measured).
ARCH_COLUMNS = (*LOOPED_ARCH_COLUMNS[:6], "n_params", *LOOPED_ARCH_COLUMNS[6:], "flops_per_token")

# A target token is far when its previous occurrence lies more than the distance back and none lies
# within it (definition 2). Definition 1, of sweeps stored earlier, counted a token as far whenever it
# also occurred beyond the window, even when it occurred inside it too.
FAR_DEFINITION = 2
DEFAULT_FAR_DISTANCE = 500  # tokens: "copy from more than 500 tokens back"


class Optimizer(StrEnum):
    """An optimizer by name: AdamW on every parameter, or one of the Muon variants (orthogonalised
    momentum on the matrices, AdamW on the embeddings and scalars)."""

    PARCAE = "parcae"
    TORCH_MUON = "torch_muon"
    ADAMW = "adamw"
