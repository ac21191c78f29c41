"""Names and definitions that specs and result rows store, declared once below every package that reads
them: pure Python (no torch), so a grid is validated and the analysis reads rows without importing torch.

- `Optimizer`: the optimizers a train job chooses by name (the model's memory accounting in
  model/memory.py and the trainer's factory in workers/optim.py read the same names);
- the far-copy split of the depth sweep (workers/validation.py measures it, analysis/far_copy.py and the
  claims read it): `FAR_DEFINITION`, the definition a row's `far_definition` names, and
  `DEFAULT_FAR_DISTANCE`, the lean-recipe note's distance.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["DEFAULT_FAR_DISTANCE", "FAR_DEFINITION", "Optimizer"]

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
