"""The training loop behind `workers.train.job.run`: budget → steps, calibration, steps, evaluation, checkpoints.

Clocks: `train_seconds` counts only the training steps (batch, forward, backward, optimizer);
evaluation and checkpoint writing are timed separately, so `wall_s` on every metric point and
`tokens_per_s` describe training alone (what the iso-time comparison needs). With `compile: true` the
model's static-shape parts are compiled (`LoopedLM.compile_parts`; the round loop stays in Python) and
the first step of each attempt compiles them: it is timed as `compile_seconds` (logged and in the
returned summary, not a result column) and left out of `train_seconds`. A round variant first needed
later (e.g. the no-grad round of a Poisson recipe whose first step had no truncated round) compiles
inside that later step's time.

Peak memory (`peak_mem_mb`): on CUDA the peak allocated since the time-budget calibration ended (the
calibration's copy of the model is not counted); on CPU the process's peak resident set size, which
cannot be reset, so it does include the calibration (its value right after calibration is logged).

Budgets: `tokens` (whole steps of batch x seq_len), `time_s` (planned by a calibration, re-planned
every step) or `flops`, turned into whole steps through the FLOP model (`model.counts.tokens_for_flops`
at the data's real vocabulary). Every result row carries the FLOP accounting (`_flop_fields`).

Utilisation and padding, measured: after each step the trainer counts the FLOPs its forwards computed
(each forward runs its largest loop count for all its rows: padded rounds included, per micro-batch
and loop-count bucket) and the FLOPs of each row's own rounds (`_count_step`). The difference over the
recurrent rounds' FLOPs is the step's padding waste (the `padding_waste` metric, and over the run the
row's `padding_waste`); the useful FLOPs per second over the device's peak are MFU (the row's `mfu`, and
the `mfu` metric), the computed ones HFU (the `hfu` metric and the returned summary), both with attention
counted as causal pairs (what fused causal kernels compute, as benchmarks/model_bench.py counts them; the
budget's dense count would put MFU 11-19 % high at 2,048 tokens). The FLOP model's
expected waste (`model.flops.training_flops`) is a planning figure, logged as such; the budget
accounting (`flops_per_token`, `train_flops`) stays the expected whole-batch figure.

Global and micro batch: a step is `batch_size` sequences (its rows: data windows, loop counts and
initial states, each a function of (seed, step, global row)), run in the forwards that
`workers.train.batching.split_step` makes of them (`micro_batch_size` rows at most, sorted into loop-count
buckets with `bucketing`); each forward's mean loss is scaled by its share of the step's target
tokens, so the accumulated gradient is the mean over the whole batch whatever the split. Evaluation
runs in forwards of `micro_batch_size` too.

Data parallel (workers/train/distributed.py): the same loop runs in each of N processes, each given a
`Solo` subclass that says its rank and makes the few cross-process steps collectives: its forwards of a
step (`split_step(..., ranks=N)[rank]`), DDP around the model with the gradient reduced on the last
micro-step only, the loss summed over ranks, and rank 0's value of every decision that reads a clock or
the reporter (stop, checkpoint, the time budget's seconds), so all ranks take the same steps. Rank 0
alone reports, evaluates (the validation set once, on its copy of the weights, which every rank holds
identically) and writes checkpoints; every rank's RNG state goes into them. In one process the `Solo`
defaults make each of these the identity.

A checkpoint is model + optimizers + RNG states + `TrainerState` (+ the spec and model config that
identify it); restoring those four makes the rest of a token-budget run bit-identical on CPU. It
resumes under any spec with the same `identity` (workers/train/spec.py): a new micro-batch size or
compile flag continues the same run (a different split sums in a different order: equal to float
rounding, not bit for bit).

h0 versions (`TrainerState.h0_version`): 1 = `model.init.RowKey`, each row's initial state a hash of
(seed, step, global row, position, channel); 0 = a run whose checkpoint predates it (no version saved):
one draw of (B, T, d) per step from the global RNG, as its earlier steps had, sliced per forward, so it
resumes exactly as it was.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import torch

from looplab.model.contract import build_model, family_facts
from looplab.model.counts import param_count, tokens_for_flops
from looplab.model.flops import FlopBreakdown, step_flops, training_flops
from looplab.model.init import RowKey, draw_h0
from looplab.model.memory import largest_micro_batch
from looplab.model.names import BUILTIN_FAMILY
from looplab.model.rounds import forward_sizes
from looplab.workers import artifacts
from looplab.workers import checkpoint as ckpt
from looplab.workers.data.prepare import cores_given
from looplab.workers.data.shards import (
    SAMPLER_PERMUTATION,
    get_batch,
    prepare,
    sampler_for,
    unigram_xent,
    val_chunks,
)
from looplab.workers.data.tokenizer import smaller_vocab_message
from looplab.workers.device import memory_bytes, peak_flops, peak_mem_mb, reset_peak_mem, resolve_device
from looplab.workers.inputs import EVAL_H0_SEED
from looplab.workers.reporter import UNIGRAM_XENT, JobInterrupted, Reporter
from looplab.workers.train import checkpoint as train_checkpoint
from looplab.workers.train.batching import split_step
from looplab.workers.train.optim import build_optimizers, lr_factor, set_lr
from looplab.workers.train.rewind import TEST_SPIKE, Rewind, data_step
from looplab.workers.train.schedule import TimeBudgetSchedule
from looplab.workers.train.spec import AUTO, Spec, check_artifact_dir
from looplab.workers.train.state import NonFiniteError, TrainerState
from looplab.workers.validation import autocast, evaluate


class Solo:
    """How the work of one step is shared among the processes of a run: here one process does all of
    it. `workers.train.distributed.Ranks` is the data-parallel gang: the same methods as collectives over the
    run's N processes. The trainer reaches other processes only through these, so the one-process path
    is the same code with every collective the identity."""

    rank: int = 0
    size: int = 1
    device: torch.device | None = None  # where this process trains; None: the spec's `device`

    def forwards(self, counts, micro_batch_size: int | None, bucketing: bool) -> list[list[int]]:
        """The global rows of each of this process's forwards of a step (workers/train/batching.py)."""
        return split_step(counts, micro_batch_size, bucketing, ranks=self.size)[self.rank]

    def wrap(self, model: torch.nn.Module, forward):
        """What the training steps call: `forward` (the model, or its compiled parts), DDP in a gang."""
        return forward

    def sync(self, forward, last: bool):
        """The context of one forward and its backward; in a gang, gradients are reduced on the last."""
        return contextlib.nullcontext()

    def total(self, loss: torch.Tensor) -> torch.Tensor:
        """The sum over the processes of each one's share of the step's mean loss (0-d tensor)."""
        return loss

    def agree(self, value):
        """Rank 0's `value` (a bool or a float) on every process."""
        return value

    def gather(self, obj: Any) -> list[Any]:
        """Every process's `obj`, in rank order, on rank 0 (other ranks get an empty list)."""
        return [obj]


SOLO = Solo()


# What an artifact dir of a run of another model family says about it (model/contract/).
FAMILY_FILE = "family.json"


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)


def train(spec: Spec, reporter: Reporter, artifact_dir: Path) -> dict[str, Any]:
    """Train (or resume) `spec` in `artifact_dir`; returns the `train_results` row + compile_seconds."""
    check_artifact_dir(spec, artifact_dir)
    return Trainer(spec, reporter, artifact_dir).run()


class Trainer:
    def __init__(self, spec: Spec, reporter: Reporter, artifact_dir: Path, gang: Solo = SOLO) -> None:
        self.spec, self.reporter, self.dir, self.gang = spec, reporter, artifact_dir, gang
        self.writes = gang.rank == 0  # the one process that writes checkpoints and evaluates
        self.attempt, self.ckpt_path = artifacts.begin(
            artifact_dir, getattr(reporter, "attempt", None), self.writes
        )
        # A corrupt checkpoint must fail before any work and stay where it is.
        self.saved = ckpt.load(self.ckpt_path) if self.ckpt_path is not None else None
        for stale in artifacts.temp_files(self.dir) if self.writes else ():
            stale.unlink()  # left by a process killed mid-write
        self.rewind = spec.rewind_rule  # None: spikes are only warned of (orchestrator/health.py)
        self.device = gang.device or resolve_device(spec.device)
        # every rank opens the same preparation (a file lock: one builds it, the others wait and read)
        self.data = prepare(spec.data, reporter=reporter if self.writes else None, processes=cores_given())
        if self.data.meta["tokenizer"] and self.writes:
            (self.dir / "tokenizer.json").write_bytes(
                (self.data.dir / self.data.meta["tokenizer"]).read_bytes()
            )
        self.cfg = spec.model_config(self.data.vocab_size)  # the tokenizer's vocabulary, not the asked one
        self.built_in = spec.family == BUILTIN_FAMILY  # looplab's own model, not another family
        self.vocab_asked = spec.resolved_model_config().vocab_size
        self.auto_memory = None  # bytes `micro_batch_size: auto` fitted into
        if spec.micro_batch_size == AUTO:  # an execution field: resolved here, on the device it runs on
            self.auto_memory = memory_bytes(self.device)
            fits = largest_micro_batch(self._memory_of(spec), spec.batch_size, self.auto_memory)
            self.spec = spec = dataclasses.replace(spec, micro_batch_size=fits)
        self.eval_loops = spec.resolved_eval_loops(self.cfg)
        self.seq_len = self.cfg.seq_len
        self.tokens_per_step = spec.batch_size * self.seq_len
        self.val = val_chunks(self.data.val, spec.eval_tokens, self.seq_len)  # (N, seq_len + 1)
        self.token_bytes = torch.from_numpy(self.data.token_bytes)  # (vocab,)
        seed_everything(spec.seed)
        # through the model-family contract (model/contract/): LoopedLM itself for looplab's own family
        # another family is built at the run's shape (model/shape.py), as submission checked it
        self.shape = spec.run_shape(self.data.vocab_size)
        self.built = build_model(self.cfg if self.built_in else self.shape, spec.family, spec.family_config)
        self.model = self.built.module.to(self.device)
        if self.built.builtin:
            self.param_counts = param_count(self.cfg)
            # per token, at the data's vocabulary: the run's accounting (one forward of the whole batch,
            # as the budget counts it), and the split's expected padding (a planning figure: each step's
            # real padding is counted from its forwards, `_count_step`)
            self.flops = training_flops(self.cfg, spec.batch_size)
            self.split_flops = training_flops(
                self.cfg, spec.batch_size, micro_batch_size=spec.micro_batch_size, bucketing=spec.bucketing
            )
            self.split_dependent = False
        else:
            self._family_facts()
        self.pads = self.flops.padding_waste > 0  # per-row loop counts: steps can pad, the waste is reported
        self.opts = build_optimizers(self.model, spec.optimizer, spec.lr, spec.adam_lr, spec.weight_decay)
        # the model as the training steps call it: with spec.compile, its static-shape parts compiled
        # (the round loop stays in Python: loop counts change every step; see LoopedLM.compile_parts)
        self.forward_model = gang.wrap(self.model, self.model.compile_parts() if spec.compile else self.model)
        self.state = TrainerState(sampler=sampler_for(spec.data))
        self.schedule: TimeBudgetSchedule | None = None  # time budget only
        self.gate_stats: torch.Tensor | None = (
            None  # a learned exit's last step: (task loss, mean exit round)
        )

    def _memory_of(self, spec: Spec):
        """Training memory as a function of the sequences per forward, for `micro_batch_size: auto`:
        looplab's model's (`model.memory.training_memory`) or another family's own
        (`family_training_memory`: its parameters, optimizer groups and measured activations)."""
        from looplab.model.contract import family_settings
        from looplab.model.family_pricing import family_pricing
        from looplab.model.memory import family_training_memory, training_memory

        device_type, cfg = self.device.type, self.cfg
        if self.built_in:
            return lambda n: training_memory(cfg, n, device_type, spec.optimizer)
        shape = spec.run_shape(self.data.vocab_size)
        pricing = family_pricing(spec.family, family_settings(shape, spec.family_config))
        return lambda n: family_training_memory(pricing, shape.loops, n, device_type, spec.optimizer)

    def _family_facts(self) -> None:
        """Another family's parameter counts, FLOPs per token and split-dependence (model.contract
        `family_facts`), written to family.json with the run (its package version is recorded there, not
        hashed) and said in the log."""
        facts = family_facts(self.built, self.shape)
        self.param_counts, self.split_dependent = facts.param_counts, facts.split_dependent
        self.flops = self.split_flops = facts.flops
        if self.writes:
            (self.dir / FAMILY_FILE).write_text(json.dumps(facts.record(), indent=1, sort_keys=True))
        self.reporter.log(facts.describe())

    def _split(self) -> dict[str, Any]:
        """How a step's rows are split over forwards and workers (what a split-dependent family's random
        draws depend on)."""
        spec = self.spec
        return {
            "micro_batch_size": spec.micro_batch_size,
            "bucketing": spec.bucketing,
            "workers": self.gang.size,
        }

    # -------------------------------------------------------------------------------------- run
    def run(self) -> dict[str, Any]:
        spec, rep, state = self.spec, self.reporter, self.state
        if spec.time_s is not None:
            self.schedule = self._calibrate()
            state.total_steps = self.schedule.total_steps
        elif spec.flops is not None:
            tokens = self._flop_budget_tokens(spec.flops)
            state.total_steps = tokens // self.tokens_per_step
            rep.log(f"FLOP budget {spec.flops:.3g} → {state.total_steps} steps ({tokens:,} tokens)")
        else:
            state.total_steps = max(1, spec.tokens // self.tokens_per_step)
        seed_everything(spec.seed + 1)  # calibration or not, training starts from the same RNG state
        train_checkpoint.same_everywhere(self)
        if self.saved is not None:
            saved, self.saved = self.saved, None  # not kept for the whole run: it holds every tensor twice
            self._restore(saved)
            rep.resumed(self.state.step)
            rep.log(f"resumed from {self.ckpt_path} at step {self.state.step}/{self.state.total_steps}")
        self._say_data()
        if self.writes:  # each attempt: the health rules of an attempt start afresh
            rep.metric(UNIGRAM_XENT, 0, unigram_xent(self.data))
        rep.log(
            f"train {spec.model_name}: {self.param_counts['total']:,} params, "
            f"{self.state.total_steps} steps of {self.tokens_per_step} tokens on {self.device}; "
            + self._batch_line()
        )
        self._loop()
        state = self.state
        if state.last_val_loss is None or state.step_of_last_val != state.step:
            self._evaluate()
        self._save(final=True)
        row = {
            "steps": state.total_steps,
            "tokens": state.total_steps * self.tokens_per_step,
            "train_seconds": state.train_seconds,
            "eval_seconds": state.eval_seconds,
            "ckpt_seconds": state.ckpt_seconds,
            "tokens_per_s": state.total_steps * self.tokens_per_step / max(state.train_seconds, 1e-9),
            "final_train_loss": state.last_train_loss,
            "final_val_loss": state.last_val_loss,
            "final_val_bpb": state.last_val_bpb,
            "peak_mem_mb": peak_mem_mb(self.device),
            "n_params": self.param_counts["total"],
            "n_params_non_embedding": self.param_counts["non_embedding"],
            "time_budget_s": spec.time_s,
            "calib_tokens_per_s": state.calib_tokens_per_s,
            "device": str(self.device),
            "workers": self.gang.size,
            "micro_batch_size": spec.micro_batch_size or spec.batch_size,
            "vocab_size": self.data.vocab_size,
            "vocab_size_asked": self.vocab_asked,
            **self._flop_fields(state.total_steps * self.tokens_per_step, state.train_seconds),
        }
        if spec.time_s is not None:
            off = (state.train_seconds - spec.time_s) / spec.time_s
            rep.log(f"time budget {spec.time_s:.1f}s: trained {state.train_seconds:.1f}s ({off:+.1%})")
        if spec.compile:
            rep.log(f"compile: {state.compile_seconds:.1f}s (first steps, not in train_seconds)")
        rep.result("train_results", row)
        extra = {"compile_seconds": state.compile_seconds if spec.compile else None, "hfu": self._hfu()}
        return {**row, **extra, "flops_computed": state.flops_computed, "flops_useful": state.flops_useful}

    def _batch_line(self) -> str:
        """How a step runs: global batch, micro-batch, bucketing, and the padding that remains."""
        spec = self.spec
        forwards = len(forward_sizes(spec.batch_size, spec.micro_batch_size))
        line = (
            f"global batch {spec.batch_size}, micro-batch {spec.micro_batch_size or spec.batch_size} "
            f"({forwards} forward{'s' if forwards > 1 else ''} per step"
            + (
                ""
                if self.auto_memory is None
                else f"; auto: the most that fit {self.auto_memory / 2**30:.0f} GiB"
            )
            + "), "
            f"bucketing {'on' if spec.bucketing else 'off'}"
        )
        if self.pads:
            line += f", expected padding {self.split_flops.padding_waste:.1%} of the rounds' FLOPs"
            if forwards > 1:
                line += f" (one forward of the batch: {self.flops.padding_waste:.1%})"
        return line

    def _say_data(self) -> None:
        """Log what the data is short of: a tokenizer smaller than asked (the model, its parameters and
        FLOPs use the vocabulary it has), a run longer than one pass over its train tokens."""
        got, rep = self.data.vocab_size, self.reporter
        if got < self.vocab_asked:
            rep.log(smaller_vocab_message(self.vocab_asked, got), "WARNING")
        windows = (len(self.data.train) - 1) // self.seq_len
        needed = self.state.total_steps * self.spec.batch_size
        if self.state.sampler == SAMPLER_PERMUTATION and needed > windows:
            rep.log(
                f"data: the run reads {needed:,} windows of {self.seq_len + 1} tokens, its train split holds "
                f"{windows:,} ({len(self.data.train):,} tokens): {needed / windows:.2f} passes over it",
                "WARNING",
            )

    def _flop_fields(self, tokens: int, train_seconds: float) -> dict[str, float | None]:
        """The result row's FLOP accounting. `flops_per_token`, `train_flops` and `achieved_flops_per_s`
        are the run's budget accounting: the model's training FLOPs per token expected over the loop
        sampler for one forward of the whole batch (model.flops; what a FLOP budget is turned into
        steps by, whatever the micro-batches), their total and that total per training second.
        `mfu` and `padding_waste` are measured from the steps' real forwards (`_count_step`): the
        useful FLOPs (each row's own rounds) per training second over the workers' peak (GPUs the
        peak table knows), and the padded share of the recurrent rounds' FLOPs over the run."""
        state = self.state
        per_token = self.flops.total
        achieved = per_token * tokens / max(train_seconds, 1e-9)
        waste = state.round_flops_padded / state.round_flops if state.round_flops > 0 else 0.0
        return {
            "flops_per_token": per_token,
            "train_flops": per_token * tokens,
            "achieved_flops_per_s": achieved,
            "mfu": self._utilisation(state.flops_useful),
            "padding_waste": waste,
        }

    def _utilisation(self, flops: float) -> float | None:
        """`flops` of the timed steps per training second over the workers' peak: None on a CPU, on a
        GPU the peak table does not know (workers/device.py DEVICES) and before any step was timed."""
        peak, seconds = peak_flops(self.device), self.state.flops_seconds
        if peak is None or seconds <= 0:
            return None
        return flops / seconds / (peak * self.gang.size)

    def _hfu(self) -> float | None:
        """Hardware-FLOPs utilisation: as MFU, with the FLOPs computed for padded rounds counted too."""
        return self._utilisation(self.state.flops_computed)

    def _count_step(self, step: int, attention: str = "dense") -> FlopBreakdown:
        """FLOPs per token of step `step` as it ran: every process's forwards of it (`split_step`), each
        padded to its own largest loop count (model.flops.step_flops), against each row's own rounds
        (its `useful` FLOPs), counting attention by `attention` (model/flops.py: "dense", every T x T pair
        handed to the kernel, or "causal", the pairs the mask lets through). The counts and the split are
        functions of (seed, step): recomputed here, outside the timed step, on every rank alike."""
        if not self.built.builtin:  # a family: rows of different counts run apart, nothing is padded
            return self.flops
        spec = self.spec
        counts = self.model.sample_loops(spec.batch_size, step, spec.seed).tolist()
        split = split_step(counts, spec.micro_batch_size, spec.bucketing, ranks=self.gang.size)
        forwards = [rows for rank in split for rows in rank]
        return step_flops(self.cfg, counts, self.seq_len, forwards=forwards, attention=attention)

    def _flop_budget_tokens(self, flops: float) -> int:
        """The tokens of the whole steps a FLOP budget trains (the FLOP model's conversion for LoopedLM;
        a family's FLOPs per token otherwise)."""
        spec = self.spec
        if self.built.builtin:
            return tokens_for_flops(self.cfg, flops, spec.batch_size, self.seq_len)
        return max(1, int(flops / self.flops.total) // self.tokens_per_step) * self.tokens_per_step

    def _account(self, step: int, seconds: float, timed: bool) -> float:
        """Add step `step`'s counted FLOPs to the run's (the utilisation's only when it was timed);
        returns its measured padding waste."""
        state, counted = self.state, self._count_step(step)
        tokens = self.tokens_per_step
        state.round_flops += counted.recurrent * tokens
        state.round_flops_padded += counted.padded * tokens
        if timed:  # utilisation counts causal pairs, as benchmarks/model_bench.py does (fused causal
            done = self._count_step(step, "causal")  # kernels skip the key blocks above the diagonal)
            state.flops_computed += done.total * tokens
            state.flops_useful += done.useful * tokens
            state.flops_seconds += seconds
        return counted.padding_waste

    def _calibrate(self) -> TimeBudgetSchedule:
        """The time-budget schedule, its first plan from the throughput of a few throw-away steps on a
        copy of the model (a resumed run reads the plan it started with from calibration.json)."""
        spec, state = self.spec, self.state
        path = self.dir / "calibration.json"
        gang = self.gang  # in a gang every rank runs the same steps, rank 0's clock decides
        if gang.agree(path.exists()):
            saved = json.loads(path.read_text())
            state.calib_tokens_per_s, steps = saved["calib_tokens_per_s"], int(saved["total_steps"])
        else:
            model = copy.deepcopy(self.model)
            forward_model = gang.wrap(model, model.compile_parts() if spec.compile else model)
            opts = build_optimizers(model, spec.optimizer, spec.lr, spec.adam_lr, spec.weight_decay)
            # Two untimed warm-up steps (allocation, compilation), then at least `calib_steps` timed
            # steps and at least 5 % of the budget (capped at 60 s), so one slow step does not skew it.
            for step in range(2):
                self._train_step(model, forward_model, opts, step, 1.0, 0.0)
            times: list[float] = []
            while gang.agree(len(times) < spec.calib_steps or sum(times) < min(0.05 * spec.time_s, 60.0)):
                t0 = time.perf_counter()
                self._train_step(model, forward_model, opts, 2 + len(times), 1.0, 0.0)
                times.append(time.perf_counter() - t0)
            del model, forward_model, opts
            state.calib_tokens_per_s = gang.agree(self.tokens_per_step * len(times) / sum(times))
            steps = max(1, int(spec.time_s * state.calib_tokens_per_s / self.tokens_per_step))
            self.reporter.log(
                f"calibration: {state.calib_tokens_per_s:,.0f} tokens/s → {steps} steps for {spec.time_s:.1f}s"
                f" (peak memory so far {peak_mem_mb(self.device):,.0f} MB)"
            )
            if self.writes:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(
                    json.dumps({"calib_tokens_per_s": state.calib_tokens_per_s, "total_steps": steps})
                )
                os.replace(tmp, path)
        reset_peak_mem(self.device)  # the copy's memory is not the run's
        return TimeBudgetSchedule(
            spec.time_s,
            steps,
            self.tokens_per_step / state.calib_tokens_per_s,
            warmup_steps=spec.warmup_steps,
            cooldown_frac=spec.cooldown_frac,
        )

    # --------------------------------------------------------------------------------------- steps
    def _train_step(self, model, forward_model, opts, step: int, factor: float, progress: float):
        """One optimizer step at `step`: the gradient of `_accumulate`, clipped, applied; returns
        (train loss, matrix-group lr)."""
        lr = set_lr(opts, factor, progress=progress)
        loss = self.gang.total(self._accumulate(model, forward_model, step))
        norm = None
        if self.spec.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.spec.grad_clip)
        for opt in opts:
            opt.step()
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        if norm is None:
            return loss.item(), lr
        # one sync for both; weights a non-finite norm spoilt are never saved (the caller raises first)
        loss_value, norm_value = torch.stack([loss.detach().float(), norm.float()]).tolist()
        if not math.isfinite(norm_value) and math.isfinite(loss_value):
            raise NonFiniteError("grad_norm", step, norm_value)
        return loss_value, lr

    def _accumulate(self, model, forward_model, step: int) -> torch.Tensor:
        """Forward and backward of every forward of step `step` (`split_step`), adding into the
        parameters' .grad the gradient of the step's mean loss; returns that loss (a 0-d device tensor).
        A row's window, loop count and h0 are functions of (seed, step, global row), whatever forward
        holds it; each forward's mean is scaled by its share of the step's target tokens. In a gang
        this process runs its forwards only, and the gradient is reduced (summed) over the processes
        in the backward of its last one; the loss returned is this process's share."""
        spec, T = self.spec, self.seq_len
        counts = model.sample_loops(spec.batch_size, step, spec.seed)  # (B,) on the CPU, read without a sync
        forwards = self.gang.forwards(counts, spec.micro_batch_size, spec.bucketing)
        h0 = self._step_h0(step)  # (B, T, d) for a version-0 run, else None
        n_targets = spec.batch_size * T  # get_batch's targets are all real tokens (none is -1)
        loss = torch.zeros((), device=self.device)
        gate = None  # a learned exit's (task loss, expected rounds), as the loss: each forward's share
        for j, rows in enumerate(forwards):
            data_at = data_step(step, self.state.skipped_steps)  # the step itself unless spikes were skipped
            x, y = get_batch(
                self.data.train, spec.batch_size, T, spec.seed, data_at, self.state.sampler, rows
            )
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            key = RowKey(spec.seed, step, tuple(rows)) if h0 is None else h0[rows]
            with self.gang.sync(forward_model, last=j == len(forwards) - 1):
                with autocast(self.device):
                    out = forward_model(x, targets=y, loops=counts[rows], h0_seed=key)
                share = len(rows) * T / n_targets
                part = out.loss * share  # this forward's share of the step's mean
                if data_at == TEST_SPIKE[0]:
                    part = (
                        part * TEST_SPIKE[1]
                    )  # tests only: a spike at a data step (workers/train/rewind.py)
                part.backward()
            loss += part.detach()
            if out.task_loss is not None:
                both = torch.stack([out.task_loss.detach(), out.expected_rounds.detach()]) * share
                gate = both if gate is None else gate + both
        self.gate_stats = None if gate is None else self.gang.total(gate)
        return loss

    def _step_h0(self, step: int) -> torch.Tensor | None:
        """A version-0 run's h0 for the whole step: (B, T, d) fp32 from the global RNG, drawn exactly as
        its one forward per step drew it before h0 was row-addressed (None for version 1)."""
        cfg = self.cfg
        if self.state.h0_version != 0 or not cfg.random_h0:
            return None
        positions = torch.arange(self.seq_len, device=self.device)
        like = torch.empty((), device=self.device)
        return draw_h0(self.spec.batch_size, positions, cfg.d_model, cfg.initial_state_std, None, like)

    def _factor(self, step: int) -> float:
        """Learning-rate multiplier at `step`: the fixed schedule, or the time budget's moving one."""
        if self.schedule is not None:
            return self.schedule.factor(step)
        spec = self.spec
        return lr_factor(step, self.state.total_steps, spec.warmup_steps, spec.cooldown_frac)

    def _loop(self) -> None:
        spec, rep, state = self.spec, self.reporter, self.state
        self.model.train()
        last_ckpt = last_beat = time.monotonic()
        last_progress = 0.0
        start_step, start_seconds = state.step, state.train_seconds
        timed_from = start_step + 1 if spec.compile else start_step  # this attempt's first step compiles
        while state.step < state.total_steps:
            if self.schedule is not None:
                state.total_steps = self.schedule.plan(state.step, state.train_seconds)
            total = state.total_steps
            if self.gang.agree(rep.should_stop()):
                self._save()
                raise JobInterrupted(f"stopped at step {state.step}")
            step = state.step
            t0 = time.perf_counter()
            loss, lr = self._train_step(
                self.model, self.forward_model, self.opts, step, self._factor(step), step / total
            )
            seconds = self.gang.agree(time.perf_counter() - t0)
            if step < timed_from:
                state.compile_seconds += seconds
            else:
                state.train_seconds += seconds
                if self.schedule is not None:
                    self.schedule.observe(seconds)
            waste = self._account(step, seconds, timed=step >= timed_from)
            if not math.isfinite(loss):
                raise NonFiniteError("train_loss", step, float(loss))
            state.step, state.last_train_loss = step + 1, loss
            tokens = state.step * self.tokens_per_step
            if step % spec.log_every == 0 or state.step == total:
                wall = state.train_seconds
                rep.metric("train_loss", step, loss, tokens=tokens, wall_s=wall)
                rep.metric("lr", step, lr, tokens=tokens, wall_s=wall)
                rep.metric("tokens_per_s", step, tokens / max(wall, 1e-9), tokens=tokens, wall_s=wall)
                if self.gate_stats is not None:  # a learned exit: the objective's task part, mean exit round
                    task, rounds = self.gate_stats.tolist()
                    rep.metric("train_task_loss", step, task, tokens=tokens, wall_s=wall)
                    rep.metric("gate_expected_rounds", step, rounds, tokens=tokens, wall_s=wall)
                self._report_flops(step, waste, tokens, wall)
            if self.rewind is not None and self._rewound(step, loss):
                state = self.state  # the checkpoint's, from before the spike
                continue
            if state.step % spec.eval_every == 0 or state.step == total:
                self._evaluate()
            if time.monotonic() - last_progress > 1.0 or state.step == total:  # the bar needs no more
                rate = (state.train_seconds - start_seconds) / max(1, state.step - timed_from)
                rep.progress(state.step, total, rate * (total - state.step))
                last_progress = time.monotonic()
            now = time.monotonic()
            if self.gang.agree(state.step % spec.ckpt_every == 0 or now - last_ckpt > spec.ckpt_minutes * 60):
                self._save()
                last_ckpt = time.monotonic()
            if now - last_beat > 10:
                rep.heartbeat()
                last_beat = now

    def _rewound(self, step: int, loss: float) -> bool:
        """Whether step `step`'s loss was a spike that sent the run back (workers/train/rewind.py `Rewind`)."""
        back = Rewind.of(self.rewind, self.state, self.dir, step, loss)
        if back is None:
            return False
        self.ckpt_path = back.path
        self._restore(ckpt.load(back.path))
        self.state.skipped_steps, self.state.rewinds = back.skipped, back.n
        self.reporter.rewound(self.state.step, step, back.rows(self.spec.batch_size), back.n)
        self.reporter.log(back.message(self.spec.batch_size))
        return True

    def _report_flops(self, step: int, waste: float, tokens: int, wall: float) -> None:
        """The step's measured padding waste (for per-row loop counts; 0 otherwise, not reported) and,
        on a GPU of the peak table, MFU and HFU of the timed steps so far."""
        rep = self.reporter
        if self.pads:
            rep.metric("padding_waste", step, waste, tokens=tokens, wall_s=wall)
        mfu, hfu = self._utilisation(self.state.flops_useful), self._hfu()
        if mfu is not None and hfu is not None:
            rep.metric("mfu", step, mfu, tokens=tokens, wall_s=wall)
            rep.metric("hfu", step, hfu, tokens=tokens, wall_s=wall)

    def _evaluate(self) -> None:
        """Validation loss and bpb at the trained loop count, and the loss at each of `eval_loops`,
        all with training's h0 seed; reported at the last step done. In a gang on rank 0 only: the
        others hold the same weights, and one process's evaluation is the one-process run's number, bit
        for bit (a sharded one would sum in another order), for a small share of the run's time."""
        if not self.writes:
            return
        state, rep = self.state, self.reporter
        t0 = time.perf_counter()

        def run_eval(loops: int | None):
            return evaluate(
                self.model,
                self.val,
                self.spec.batch_size,
                self.device,
                self.token_bytes,
                loops=loops,
                h0_seed=EVAL_H0_SEED,
                micro_batch_size=self.spec.micro_batch_size,
            )

        trained = run_eval(None)
        if not math.isfinite(trained.loss):  # weights the last update spoilt: fail before they are saved
            raise NonFiniteError("val_loss", max(0, state.step - 1), float(trained.loss))
        loss_at = {n: trained.loss if n == self.cfg.loops else run_eval(n).loss for n in self.eval_loops}
        state.eval_seconds += time.perf_counter() - t0
        state.last_val_loss, state.last_val_bpb = trained.loss, trained.bpb
        state.step_of_last_val = state.step
        step, tokens, wall = max(0, state.step - 1), state.step * self.tokens_per_step, state.train_seconds
        rep.metric("val_loss", step, trained.loss, tokens=tokens, wall_s=wall)
        rep.metric("val_bpb", step, trained.bpb, tokens=tokens, wall_s=wall)
        for n, loss in loss_at.items():
            rep.metric(f"val_loss@{n}", step, loss, tokens=tokens, wall_s=wall)
        rep.metric("peak_mem_mb", step, peak_mem_mb(self.device), tokens=tokens, wall_s=wall)

    # --------------------------------------------------------------------------------- checkpoints
    def _save(self, final: bool = False) -> None:
        """Write a checkpoint (and `final.pt` at the end): workers/train/checkpoint.py `save`."""
        train_checkpoint.save(self, final)

    def _restore(self, saved: dict[str, Any]) -> None:
        """Continue from a checkpoint of the same run: workers/train/checkpoint.py `restore`."""
        train_checkpoint.restore(self, saved)
