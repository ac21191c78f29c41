"""Optimizers and the learning-rate schedule of a training run.

Three optimizers, chosen by name (`model.names.Optimizer`):
- "parcae" (default): the Parcae reference's Muon+AdamW (`workers.train.muon.ParcaeMuonAdamW`) — Muon for the
  2-D matrices and the value-embedding gates, AdamW for embeddings, norms and the injection; lr 8e-3 for
  both, cautious Muon weight decay 0.2 falling linearly to 0 over training, first step skipped.
- "torch_muon": `torch.optim.Muon`'s algorithm (Newton–Schulz, lr 0.02, fp32 on the CPU) for the 2-D
  matrices, AdamW (lr 3e-3, betas (0.9, 0.95)) for everything else, gates included.
- "adamw": AdamW for everything.

Every param group remembers its `initial_lr` and `initial_weight_decay`; `set_lr` is called before each
step with the schedule's factor and the fraction of training done. The schedule is a constant learning
rate, an optional linear warmup, and a linear cooldown over the last `cooldown_frac` of the steps that
reaches exactly zero on the last step, for any number of steps, so a run always completes its decay
within its budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from looplab.model import fields
from looplab.model.names import Optimizer
from looplab.workers.train.muon import ParcaeMuonAdamW, TorchMuon

# Runs stored before the optimizers were renamed called today's "torch_muon" simply "muon".
_OLD_NAMES = {"muon": Optimizer.TORCH_MUON}
ADAM_BETAS = (0.9, 0.95)  # AdamW of "torch_muon" and "adamw"; "parcae" uses the reference's (0.8, 0.95)


@dataclass(frozen=True)
class OptimizerDefaults:
    """What `None` means for each argument of `build_optimizers`."""

    lr: float  # Muon lr (AdamW lr for the matrices with "adamw")
    adam_lr: float | None  # AdamW lr of the non-matrix parameters; None: same as lr
    weight_decay: float  # Muon's (AdamW's with "adamw"); "parcae": the peak of its linear decay


DEFAULTS = {
    Optimizer.PARCAE: OptimizerDefaults(lr=8e-3, adam_lr=8e-3, weight_decay=0.2),
    Optimizer.TORCH_MUON: OptimizerDefaults(lr=0.02, adam_lr=3e-3, weight_decay=0.0),
    Optimizer.ADAMW: OptimizerDefaults(lr=3e-3, adam_lr=None, weight_decay=0.0),
}
# param-group key: how `set_lr` moves weight decay with training progress
WEIGHT_DECAY_SCHEDULE = "weight_decay_schedule"
LINEAR_TO_ZERO = "linear_to_zero"


def lr_factor(step: int, total_steps: int, warmup_steps: int = 0, cooldown_frac: float = 0.5) -> float:
    """Multiplier of the base learning rate at 0-based `step` of `total_steps`; 0.0 at the last step."""
    if total_steps <= 1:
        return 0.0
    cooldown = max(1, round(cooldown_frac * total_steps))
    start = total_steps - cooldown  # first step of the cooldown, where the factor is still 1
    if step >= start:
        span = total_steps - 1 - start
        f = 0.0 if span == 0 else (total_steps - 1 - step) / span
    else:
        f = 1.0
    if warmup_steps > 0 and step < warmup_steps:
        f = min(f, (step + 1) / warmup_steps)
    return max(0.0, f)


def build_optimizers(
    model, optimizer: str, lr: float | None, adam_lr: float | None, weight_decay: float | None
) -> list[torch.optim.Optimizer]:
    """The optimizers of `model` (stepped in order; the first group of the first is the matrix group).

    `model.param_groups()` gives "matrix" (2-D weights), optionally "ve_gate" (value-embedding gates)
    and "other"; `None` for lr/adam_lr/weight_decay means that optimizer's default (`DEFAULTS`)."""
    optimizer = Optimizer(fields.choice("optimizer", _OLD_NAMES.get(optimizer, optimizer), tuple(Optimizer)))
    lr = fields.number("lr", lr, lo=0, lo_open=True, allow_none=True)
    adam_lr = fields.number("adam_lr", adam_lr, lo=0, lo_open=True, allow_none=True)
    weight_decay = fields.number("weight_decay", weight_decay, lo=0, allow_none=True)
    defaults = DEFAULTS[optimizer]
    lr = defaults.lr if lr is None else lr
    adam_lr = (defaults.adam_lr or lr) if adam_lr is None else adam_lr
    weight_decay = defaults.weight_decay if weight_decay is None else weight_decay

    groups = model.param_groups()
    matrix = [p for p in groups["matrix"] if p.requires_grad]
    gates = [p for p in groups.get("ve_gate", []) if p.requires_grad]
    other = [p for p in groups["other"] if p.requires_grad]
    # AdamW of torch_muon/adamw: the gates among the others in model order, the order of the single
    # "other" list of checkpoints written before the gates had their own group
    rest = _in_model_order(model, gates + other)
    opts: list[torch.optim.Optimizer]
    if optimizer is Optimizer.PARCAE:
        opt = ParcaeMuonAdamW(matrix + gates, other, lr=lr, adam_lr=adam_lr, weight_decay=weight_decay)
        for group in opt.param_groups:
            if group["kind"] == "muon":
                group[WEIGHT_DECAY_SCHEDULE] = LINEAR_TO_ZERO
        opts = [opt]
    elif optimizer is Optimizer.TORCH_MUON:
        opts = [
            TorchMuon(matrix, lr=lr, weight_decay=weight_decay, momentum=0.95),
            torch.optim.AdamW(rest, lr=adam_lr, betas=ADAM_BETAS, weight_decay=0.0),
        ]
    else:
        opts = [
            torch.optim.AdamW(
                [{"params": matrix, "lr": lr}, {"params": rest, "lr": adam_lr}],
                lr=lr,
                betas=ADAM_BETAS,
                weight_decay=weight_decay,
            )
        ]
    for opt in opts:
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"]
            group["initial_weight_decay"] = group["weight_decay"]
    return opts


def _in_model_order(model, params: list[torch.Tensor]) -> list[torch.Tensor]:
    wanted = {id(p) for p in params}
    return [p for p in model.parameters() if id(p) in wanted]


def set_lr(opts: list[torch.optim.Optimizer], factor: float, progress: float = 0.0) -> float:
    """Before each step: every group's lr to `factor` × its initial lr, and the weight decay of groups
    that decay it to initial × (1 − `progress`), `progress` = fraction of training done (step / total
    steps, clamped to [0, 1]). Returns the first (matrix) group's lr."""
    remaining = 1.0 - min(max(progress, 0.0), 1.0)
    for opt in opts:
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * factor
            if group.get(WEIGHT_DECAY_SCHEDULE) == LINEAR_TO_ZERO:
                group["weight_decay"] = group["initial_weight_decay"] * remaining
    return float(opts[0].param_groups[0]["lr"])
