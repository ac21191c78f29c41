"""The training loop behind `workers.train.run`: budget → steps, calibration, steps, eval, checkpoints.

Clocks: `train_seconds` counts only the training steps (batch, forward, backward, optimizer);
evaluation and checkpoint writing are timed separately, so `wall_s` on every metric point and
`tokens_per_s` describe training alone (what the iso-time comparison needs).
"""

from __future__ import annotations

import copy
import json
import math
import os
import resource
import time
from pathlib import Path
from typing import Any

import torch

from model.errors import ConfigError
from workers import checkpoint as ckpt
from workers.data import get_batch, prepare, val_chunks
from workers.evaluate import autocast, evaluate
from workers.jobs import JobInterrupted
from workers.optim import build_optimizers, lr_factor, set_lr
from workers.spec_fields import EVAL_H0_SEED, resolve_device


def peak_mem_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


class Trainer:
    def __init__(self, spec, reporter, artifact_dir: Path) -> None:
        self.spec, self.rep, self.dir = spec, reporter, artifact_dir
        self.ckpt_path = artifact_dir / ckpt.CHECKPOINT

    # -------------------------------------------------------------------------------------- setup
    def run(self) -> dict[str, Any]:
        from model.counts import param_count
        from model.looped import LoopedLM
        from workers.train import seed_everything

        spec, rep = self.spec, self.rep
        # A corrupt checkpoint must fail before any work and stay where it is.
        state = ckpt.load(self.ckpt_path) if self.ckpt_path.exists() else None
        for stale in self.dir.glob(f".{ckpt.CHECKPOINT}.tmp*"):  # left by a process killed mid-write
            stale.unlink()
        self.device = resolve_device(spec.device)
        data = prepare(spec.data)
        self.data = data
        if data.meta["tokenizer"]:
            (self.dir / "tokenizer.json").write_bytes((data.dir / data.meta["tokenizer"]).read_bytes())
        self.cfg = spec.model_config(data.vocab_size)
        self.seq_len = self.cfg.seq_len
        self.tokens_per_step = spec.batch_size * self.seq_len
        self.val = val_chunks(data.val, spec.eval_tokens, self.seq_len)
        self.token_bytes = torch.from_numpy(data.token_bytes)

        seed_everything(spec.seed)
        self.model = LoopedLM(self.cfg).to(self.device)
        self.opts = build_optimizers(self.model, spec.optimizer, spec.lr, spec.adam_lr, spec.weight_decay)
        self.fwd = torch.compile(self.model) if spec.compile else self.model
        counts = param_count(self.cfg)
        self.calib_tps: float | None = None
        if spec.time_s is not None:
            self.total_steps = self._calibrated_steps()
        else:
            self.total_steps = max(1, spec.tokens // self.tokens_per_step)
        self.in_cooldown, self.cool_f = False, 1.0  # time budget: schedule position (see _factor)
        self.recent: list[float] = []  # time budget: the last step times of this attempt
        seed_everything(spec.seed + 1)  # calibration or not, training starts from the same RNG state

        self.step, self.train_s, self.eval_s, self.ckpt_s = 0, 0.0, 0.0, 0.0
        self.last_loss: float | None = None
        self.last_val: tuple[float, float] | None = None
        if state is not None:
            self._restore(state)
            rep.resumed(self.step)
            rep.log(f"resumed from {self.ckpt_path} at step {self.step}/{self.total_steps}")
        rep.log(
            f"train {spec.recipe}/{spec.size}: {counts['total']:,} params, {self.total_steps} steps "
            f"of {self.tokens_per_step} tokens on {self.device}"
        )
        self._loop()
        if self.last_val is None or self.step_of_last_val != self.step:
            self._eval()
        self._save(final=True)
        row = {
            "steps": self.total_steps,
            "tokens": self.total_steps * self.tokens_per_step,
            "train_seconds": self.train_s,
            "eval_seconds": self.eval_s,
            "ckpt_seconds": self.ckpt_s,
            "tokens_per_s": self.total_steps * self.tokens_per_step / max(self.train_s, 1e-9),
            "final_train_loss": self.last_loss,
            "final_val_loss": self.last_val[0],
            "final_val_bpb": self.last_val[1],
            "peak_mem_mb": peak_mem_mb(self.device),
            "n_params": counts["total"],
            "n_params_non_embedding": counts["non_embedding"],
            "time_budget_s": spec.time_s,
            "calib_tokens_per_s": self.calib_tps,
            "device": str(self.device),
        }
        if spec.time_s is not None:
            off = (self.train_s - spec.time_s) / spec.time_s
            rep.log(f"time budget {spec.time_s:.1f}s: trained {self.train_s:.1f}s ({off:+.1%})")
        rep.result("train_results", row)
        return row

    def _calibrated_steps(self) -> int:
        """Steps that fit `time_s` at the throughput of a few throw-away steps on a copy of the model."""
        spec = self.spec
        path = self.dir / "calibration.json"
        if path.exists():  # a resumed run keeps the step count it started with
            c = json.loads(path.read_text())
            self.calib_tps = c["calib_tokens_per_s"]
            return int(c["total_steps"])
        model = copy.deepcopy(self.model)
        fwd = torch.compile(model) if spec.compile else model
        opts = build_optimizers(model, spec.optimizer, spec.lr, spec.adam_lr, spec.weight_decay)
        # Two untimed warm-up steps (allocation, compilation), then at least `calib_steps` timed steps
        # and at least 5 % of the budget (capped at 60 s), so one slow step does not skew the estimate.
        for s in range(2):
            self._step(model, fwd, opts, s, 1.0)
        times: list[float] = []
        while len(times) < spec.calib_steps or sum(times) < min(0.05 * spec.time_s, 60.0):
            t0 = time.perf_counter()
            self._step(model, fwd, opts, 2 + len(times), 1.0)
            times.append(time.perf_counter() - t0)
        del model, fwd, opts
        self.calib_tps = self.tokens_per_step * len(times) / sum(times)
        steps = max(1, int(spec.time_s * self.calib_tps / self.tokens_per_step))
        self.rep.log(f"calibration: {self.calib_tps:,.0f} tokens/s → {steps} steps for {spec.time_s:.1f}s")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"calib_tokens_per_s": self.calib_tps, "total_steps": steps}))
        os.replace(tmp, path)
        return steps

    # --------------------------------------------------------------------------------------- steps
    def _step(self, model, fwd, opts, step: int, factor: float) -> float:
        spec = self.spec
        lr = set_lr(opts, factor)
        x, y = get_batch(self.data.train, spec.batch_size, self.seq_len, spec.seed, step)
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        loops = model.sample_loops(spec.batch_size, step, spec.seed)
        with autocast(self.device):
            out = fwd(x, targets=y, loops=loops.to(self.device))
        out.loss.backward()
        if spec.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        for o in opts:
            o.step()
        for o in opts:
            o.zero_grad(set_to_none=True)
        self.last_lr = lr
        return out.loss.item()

    def _loop(self) -> None:
        spec, rep = self.spec, self.rep
        self.model.train()
        last_ckpt_t = last_beat = time.monotonic()
        last_progress = 0.0
        start_step, start_s = self.step, self.train_s
        while self.step < self.total_steps:
            total = self._replan() if spec.time_s is not None else self.total_steps
            if rep.should_stop():
                self._save()
                raise JobInterrupted(f"stopped at step {self.step}")
            s = self.step
            t0 = time.perf_counter()
            loss = self._step(self.model, self.fwd, self.opts, s, self._factor(s))
            dt = time.perf_counter() - t0
            self.train_s += dt
            self.recent = [*self.recent[-49:], dt]
            if not math.isfinite(loss):
                raise FloatingPointError(f"train_loss is {loss} at step {s}; lower lr or check the data")
            self.step = s + 1
            self.last_loss = loss
            tokens = self.step * self.tokens_per_step
            if s % spec.log_every == 0 or self.step == total:
                rep.metric("train_loss", s, loss, tokens=tokens, wall_s=self.train_s)
                rep.metric("lr", s, self.last_lr, tokens=tokens, wall_s=self.train_s)
                rep.metric(
                    "tokens_per_s", s, tokens / max(self.train_s, 1e-9), tokens=tokens, wall_s=self.train_s
                )
            if self.step % spec.eval_every == 0 or self.step == total:
                self._eval()
            if time.monotonic() - last_progress > 1.0 or self.step == total:  # the bar needs no more
                rate = (self.train_s - start_s) / max(1, self.step - start_step)
                rep.progress(self.step, total, rate * (total - self.step))
                last_progress = time.monotonic()
            now = time.monotonic()
            if self.step % spec.ckpt_every == 0 or now - last_ckpt_t > spec.ckpt_minutes * 60:
                self._save()
                last_ckpt_t = time.monotonic()
            if now - last_beat > 10:
                rep.heartbeat()
                last_beat = now

    def _replan(self) -> int:
        """Time budget: before every step, re-fit the step count to the time left at the recent step time.
        The short calibration only starts the estimate: warm-up and a changing machine load would
        otherwise make the run land far from `time_s`."""
        recent = self.recent[-max(3, min(50, self.step // 4)) :]
        dt = sum(recent) / len(recent) if len(recent) >= 3 else self.tokens_per_step / self.calib_tps
        left = self.spec.time_s - self.train_s
        self.total_steps = self.step + max(1, round(left / dt))
        return self.total_steps

    def _factor(self, s: int) -> float:
        """Learning-rate multiplier at step s. A token budget uses the fixed schedule `lr_factor`. A time
        budget's step count may still move, so its cooldown is tracked as a position: once it starts,
        each step scales the previous factor by (T-1-s)/(T-s), which is exactly the linear ramp of
        `lr_factor` when T stays put, follows T smoothly when it moves, and is 0 on the last step."""
        spec, T = self.spec, self.total_steps
        if spec.time_s is None:
            return lr_factor(s, T, spec.warmup_steps, spec.cooldown_frac)
        warm = min(1.0, (s + 1) / spec.warmup_steps) if spec.warmup_steps else 1.0
        if s >= T - 1:
            f = 0.0
        elif self.in_cooldown:
            f = self.cool_f * (T - 1 - s) / (T - s)
        elif s >= T - max(1, round(spec.cooldown_frac * T)):
            self.in_cooldown, f = True, 1.0
        else:
            f = 1.0
        self.cool_f = f
        return min(f, warm)

    def _eval(self) -> None:
        t0 = time.perf_counter()
        r = evaluate(
            self.model, self.val, self.spec.batch_size, self.device, self.token_bytes, h0_seed=EVAL_H0_SEED
        )
        self.eval_s += time.perf_counter() - t0
        self.last_val, self.step_of_last_val = (r.loss, r.bpb), self.step
        s, tokens = max(0, self.step - 1), self.step * self.tokens_per_step
        self.rep.metric("val_loss", s, r.loss, tokens=tokens, wall_s=self.train_s)
        self.rep.metric("val_bpb", s, r.bpb, tokens=tokens, wall_s=self.train_s)
        self.rep.metric("peak_mem_mb", s, peak_mem_mb(self.device), tokens=tokens, wall_s=self.train_s)

    # --------------------------------------------------------------------------------- checkpoints
    def _state(self, final: bool) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizers": [o.state_dict() for o in self.opts],
            "step": self.step,
            "total_steps": self.total_steps,
            "in_cooldown": self.in_cooldown,
            "cool_f": self.cool_f,
            "rng": ckpt.rng_state(),
            "spec": self.spec.to_dict(),
            "model_config": self.cfg.to_dict(),
            "train_seconds": self.train_s,
            "eval_seconds": self.eval_s,
            "ckpt_seconds": self.ckpt_s,
            "last_train_loss": self.last_loss,
            "last_val": list(self.last_val) if self.last_val else None,
            "step_of_last_val": getattr(self, "step_of_last_val", -1),
            "calib_tokens_per_s": self.calib_tps,
            "final": final,
        }

    def _save(self, final: bool = False) -> None:
        t0 = time.perf_counter()
        state = self._state(final)
        ckpt.save(self.ckpt_path, state)
        if final:
            ckpt.save(
                self.dir / ckpt.FINAL, {k: v for k, v in state.items() if k not in ("optimizers", "rng")}
            )
        self.ckpt_s += time.perf_counter() - t0
        self.rep.checkpoint(str(self.ckpt_path), self.step)

    def _restore(self, state: dict[str, Any]) -> None:
        if state["spec"] != self.spec.to_dict():
            raise ConfigError(f"checkpoint: {self.ckpt_path} belongs to a different spec (see its spec)")
        if self.spec.time_s is not None:  # a time budget continues where its schedule was
            self.total_steps, self.in_cooldown, self.cool_f = (
                state["total_steps"],
                state["in_cooldown"],
                state["cool_f"],
            )
        elif state["total_steps"] != self.total_steps:
            raise ConfigError(
                f"checkpoint: {self.ckpt_path} was made for {state['total_steps']} steps, "
                f"this run has {self.total_steps}"
            )
        self.model.load_state_dict(state["model"])
        for o, s in zip(self.opts, state["optimizers"], strict=True):
            o.load_state_dict(s)
        ckpt.set_rng_state(state["rng"])
        self.step = state["step"]
        self.train_s, self.eval_s, self.ckpt_s = (
            state["train_seconds"],
            state["eval_seconds"],
            state["ckpt_seconds"],
        )
        self.last_loss = state["last_train_loss"]
        self.last_val = tuple(state["last_val"]) if state["last_val"] else None
        self.step_of_last_val = state["step_of_last_val"]
