"""What a train job costs, from its validated Spec alone: the FLOPs and step arithmetic a time estimate
needs and the peak memory on each device type (`cost(spec)`; the planner turns it into seconds).

Every count follows what the trainer runs (workers/train/trainer.py), with the Spec's own values (its defaults
included, never re-typed here): steps = max(1, tokens // tokens per step) for a token budget, the whole
steps of `model.counts.tokens_for_flops` for a FLOP budget, unknown for a time budget; an evaluation every
`eval_every` steps and at the last one, each a forward of the first `eval_tokens` validation tokens (whole
sequences, at least one) at the trained loop count and at each other count of `resolved_eval_loops`; a
checkpoint every `ckpt_every` steps and a final one. Memory: `model.memory.training_memory`.
Torch is imported when a cost is computed, not when this module is.

A model of another family (model/contract/) is priced from the contract (`model.contract.
family_pricing`: its own FLOPs per token at each loop count, else measured once, and its parameter
count), not from the FLOP model of the recipe and size its spec names; every part of its step runs with
autograd, and rows of one batch never pad. Its memory is still `training_memory` of that ModelConfig.
"""

from __future__ import annotations

from looplab.workers.cost import TrainCost
from looplab.workers.train.spec import Spec

# the metrics the trainer reports at each logged step (workers/train/trainer.py: train_loss, lr, tokens_per_s),
# and padding_waste when rows run their own loop counts (mfu and hfu on a GPU of the peak table are left
# out: a spec does not say which GPU runs it)
LOG_POINTS = 3


def cost(spec: Spec) -> TrainCost:
    """The cost of training `spec` (its model at the vocabulary its data will have; no corpus read)."""
    from looplab.model.counts import param_count, tokens_for_flops
    from looplab.model.flops import BACKWARD_FACTOR, step_flops, training_flops
    from looplab.model.memory import DEVICE_TYPES

    cfg = spec.resolved_model_config()
    batch, seq = spec.batch_size, cfg.seq_len
    tokens_per_step = batch * seq
    if spec.tokens is not None:
        steps: int | None = max(1, spec.tokens // tokens_per_step)
    elif spec.flops is not None:
        steps = tokens_for_flops(cfg, spec.flops, batch, seq) // tokens_per_step
    else:
        steps = None
    counts = [cfg.loops, *(n for n in spec.resolved_eval_loops(cfg) if n != cfg.loops)]
    eval_tokens = max(1, spec.eval_tokens // seq) * seq
    family = spec.family_pricing(cfg)
    if family is not None:  # its own FLOPs, all with autograd, no padded rounds
        per_token = grad_per_token = family.training_flops(cfg.loops)
        forward, padded, params = family.forward_flops, False, family.n_params
        if spec.flops is not None:  # whole steps at its own FLOPs, as the trainer counts them
            steps = max(1, int(spec.flops / per_token) // tokens_per_step)
    else:
        flops = training_flops(cfg, batch)
        per_token, grad_per_token = float(flops.total), float(flops.backward * (1 + 1 / BACKWARD_FACTOR))
        forward, padded = (lambda n: step_flops(cfg, n).forward), flops.padding_waste > 0
        params = param_count(cfg)["total"]
    priced = TrainCost(
        cfg=cfg,
        batch=batch,
        tokens_per_step=tokens_per_step,
        steps=steps,
        flops_per_token=float(per_token),
        grad_flops_per_token=float(grad_per_token),
        eval_flops=float(eval_tokens * sum(forward(n) for n in counts)),
        eval_every=spec.eval_every,
        ckpt_every=spec.ckpt_every,
        keep_checkpoints=spec.keep_checkpoints,
        log_every=spec.log_every,
        log_points=LOG_POINTS + (1 if padded else 0),
        eval_points=3 + len(spec.resolved_eval_loops(cfg)),
        calib_steps=spec.calib_steps,
        params=params,
        optimizer=spec.optimizer,
        compile=spec.compile,
        memory={},
        tokenizer=spec.data.tokenizer,
        family=family,
    )
    priced.memory.update({d: priced.memory_at(batch, d) for d in DEVICE_TYPES})
    return priced
