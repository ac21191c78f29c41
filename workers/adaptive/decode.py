"""The adaptive job's decode timing (`workers.adaptive.job`, with `decode_steps` > 0): one cell's exits per
token against the fixed depth, per batch size and mode (`exit_decode_cell`, the exit rule's readouts
included, timed as the decode benchmark times its steps: `workers.device.time_steps`), and against the
fixed depth at equal loss: the shallowest fixed depth whose validation loss is no worse than the
cell's, decoded the same way. Rows of `adaptive_decodes`.

Kept apart from workers/adaptive/job.py (which calls it) so that module stays within its size; it imports
nothing of it (the cell and the spec come in as arguments).
"""

from __future__ import annotations

from typing import Any

from looplab.model import fields


def equal_loss_depth(fixed_losses: dict[int, float], loss: float) -> int | None:
    """The fewest fixed rounds r whose validation loss `fixed_losses[r]` is at most `loss`; None when no
    fixed depth up to max_rounds is as good (a cell that beats them all)."""
    return min((r for r, fixed in fixed_losses.items() if fixed <= loss), default=None)


def decode_rows(
    view, cfg, cell, R: int, chunks, spec, device, timed: dict, tick, loss: float, fixed_losses: dict
) -> list[dict[str, Any]]:
    """Decode latency of `cell` (a `workers.adaptive.job.Cell` on `view`, its model under the cell's KV
    strategy, validation loss `loss`) against the fixed depth R and against the fixed depth at equal loss
    (`fixed_losses`: {r: the fixed depth r's validation loss under the strategy}, r = 1..R), per batch
    size and mode, with the KV MiB the strategy allocates and needs for the exits seen. A fixed depth is
    timed once per strategy, batch, mode and depth (`timed` caches it across cells)."""
    from looplab.model.counts import kv_strategy_bytes

    if cell.rule is None:  # the fixed depth R is as good as itself, however its recomputation rounds
        fixed_losses = {**fixed_losses, R: loss}
    depth = equal_loss_depth(fixed_losses, loss)
    rows = []
    P, S = spec.decode_prompt, spec.decode_warmup + spec.decode_steps
    for batch in spec.decode_batch_sizes:
        c = chunks[[i % len(chunks) for i in range(batch)]].to(device)  # validation rows, repeated if few
        prompt, continuation = c[:, :P], c[:, P : P + S]

        def decode(rule, rounds: int, mode: str, prompt=prompt, continuation=continuation) -> dict[str, Any]:
            return exit_decode_cell(
                view, prompt, continuation, rule, rounds, spec.h0_seed, mode, spec.decode_warmup
            )

        for mode in EXIT_MODES:
            key = (cell.strategy_label, batch, mode)
            fixed = _fixed(timed, key, R, decode)
            equal = None if depth is None else _fixed(timed, key, depth, decode)
            got = fixed if cell.rule is None else decode(cell.rule, R, mode)
            seen = got["exit_rounds"]
            share = {r: seen.count(r) / len(seen) for r in sorted(set(seen))}
            allocated, needed = kv_strategy_bytes(
                cfg, P + S, batch, cell.strategy, R, cell.m, dtype=view.wte.weight.dtype, exit_share=share
            )
            rows.append(
                {
                    "config": cell.key,
                    "batch_size": batch,
                    "mode": mode,
                    "context_len": P + S,
                    "ms_per_token": got["ms_per_token"],
                    "ms_p10": got["ms_p10"],
                    "ms_p90": got["ms_p90"],
                    "tokens_per_s": got["tokens_per_s"],
                    "fixed_ms_per_token": fixed["ms_per_token"],
                    "speedup": fixed["ms_per_token"] / got["ms_per_token"],
                    "equal_loss_rounds": depth,
                    "equal_loss_ms_per_token": None if equal is None else equal["ms_per_token"],
                    "mean_exit_round": got["mean_exit_round"],
                    "mean_step_rounds": got["mean_step_rounds"],
                    "kv_mib": allocated / 2**20,
                    "kv_mib_needed": needed / 2**20,
                    "device": device.type,
                }
            )
            tick()
    return rows


def _fixed(timed: dict, key: tuple, rounds: int, decode) -> dict[str, Any]:
    """The decode timing of the fixed depth `rounds` at `key` (strategy, batch, mode), timed once."""
    if (*key, rounds) not in timed:
        timed[(*key, rounds)] = decode(None, rounds, key[2])
    return timed[(*key, rounds)]


EXIT_MODES = ("masked", "batch_stop")


def exit_decode_cell(
    model, prompt, continuation, rule, max_rounds: int, h0_seed: int, mode: str, warmup: int
) -> dict[str, Any]:
    """Decode `continuation` (B, S) one token at a time after prefilling `prompt` (B, P), teacher-forced
    (each step is fed the real next token), with exit rule `rule` (None: the fixed depth `max_rounds`)
    on `model` (a `model.exits.kv_view` for a KV strategy). Modes, for the batch's rows that stop at
    different rounds: `masked` runs every round for every row, stopped rows held (static shapes, no host
    sync: no time saved, the padding to the slowest row is every round); `batch_stop` ends a step's
    rounds once every row has stopped (one host sync per round: the batch waits for its slowest row).
    Returns ms_per_token (median step time; one step decodes a token for every row), ms_p10, ms_p90,
    tokens_per_s (rows / median step), mean_exit_round (over the timed tokens), mean_step_rounds (rounds
    a timed step ran) and the exit rounds of the timed tokens (`exit_rounds`, a list)."""
    import torch

    from looplab.model.exits import exit_decode_step, exit_prefill
    from looplab.workers.device import time_steps

    fields.choice("mode", mode, EXIT_MODES)
    device = prompt.device
    batch, steps = continuation.shape
    cache = model.setup_cache(batch, prompt.shape[1] + steps, loops=max_rounds, h0_seed=h0_seed)
    stop = mode == "batch_stop"
    exits, rounds = [], []
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step(i: int) -> None:
        if rule is None:
            model.decode_step(continuation[:, i], cache)
            out_round, ran = torch.full((batch,), max_rounds, device=device), max_rounds
        else:
            out = exit_decode_step(model, continuation[:, i], cache, rule, stop=stop)
            out_round, ran = out.exit_round, out.rounds_run
        if i >= warmup:
            exits.append(out_round)
            rounds.append(ran)

    with torch.no_grad():
        if rule is None:
            model.prefill(prompt, cache)
        else:
            exit_prefill(model, prompt, cache, rule, stop=stop)
        med, p10, p90 = time_steps(step, steps, warmup, sync)
    exit_rounds = torch.cat(exits).cpu().tolist()
    return {
        "ms_per_token": med,
        "ms_p10": p10,
        "ms_p90": p90,
        "tokens_per_s": batch / (med / 1e3),
        "mean_exit_round": sum(exit_rounds) / len(exit_rounds),
        "mean_step_rounds": sum(rounds) / len(rounds),
        "exit_rounds": exit_rounds,
    }
