"""Log-likelihoods of continuations under a looped LM, at a fixed loop count and h0 seed, batched.

This is the model side of task scoring, shared by the eval job and the lm-evaluation-harness adapter
(`workers.evaluate.lm_eval_adapter`), and it needs no harness.

Conventions (the harness's, for a model without special tokens):
- every input starts with the document separator the training shards put between documents
  (`workers.data.shards.DOC_SEP`): an empty context is a document start, as in training;
- a pair (context, continuation) is tokenized as the harness does for causal models: trailing spaces of
  the context move to the continuation, then `tokens(prefix + context + continuation)` is split after
  `len(tokens(prefix + context))`, so a BPE merge across the boundary is counted once;
- inputs longer than the model's `seq_len` keep their last `seq_len` tokens (the continuation must fit);
- the log-likelihood is the sum over the continuation's tokens of log p(token | everything before);
  `is_greedy` is whether every continuation token is the argmax.

Determinism: one int h0 seed for every batch. With an int seed the initial state is a function of
(seed, position, channel) only, the same for every row (see families.looped.model), so a request scores the same
whichever batch, padding or order it runs in: batches are sorted by length to pad little.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from looplab.model.errors import ConfigError
from looplab.workers.data.shards import DOC_SEP
from looplab.workers.data.tokenizer import Tokenizer, load_tokenizer
from looplab.workers.validation import autocast

TokenRequest = tuple[list[int], list[int]]  # (context tokens, continuation tokens)


def checkpoint_tokenizer(train_spec: dict[str, Any], checkpoint: str | Path) -> Tokenizer:
    """The tokenizer a checkpoint was trained with: the tokenizer.json its train job wrote next to it
    (any non-byte tokenizer), else the byte tokenizer when that is what it trained on, else the data
    cache's BPE. Only the tokenizer is loaded: no corpus is read or tokenized."""
    from looplab.workers.data.shards import DataSpec, is_cached, prepare

    checkpoint = Path(checkpoint)
    beside = (checkpoint if checkpoint.is_dir() else checkpoint.parent) / "tokenizer.json"
    if beside.is_file():
        return load_tokenizer(beside)
    data = train_spec.get("data") or {}
    name = data.get("tokenizer", "byte")
    if name == "byte":
        return Tokenizer()
    if name != "bpe":
        return load_tokenizer(Path(name).expanduser())
    spec = DataSpec.from_dict(data)
    if not is_cached(spec):
        raise ConfigError(
            f"checkpoint: {str(checkpoint)!r} was trained with a BPE tokenizer, but there is no "
            "tokenizer.json next to it and no data cache for its corpus"
        )
    return prepare(spec).tokenizer


def load_checkpoint(checkpoint: str | Path, device: torch.device):
    """(model in eval mode, its tokenizer) of a train artifact dir or checkpoint file."""
    from looplab.workers.inputs import load_model

    model, cfg, train_spec = load_model(checkpoint, device)
    tokenizer = checkpoint_tokenizer(train_spec, checkpoint)
    if tokenizer.vocab_size > cfg.vocab_size:  # fewer is a padded embedding table (an imported model's)
        raise ConfigError(
            f"checkpoint: its tokenizer's vocab {tokenizer.vocab_size} > model vocab {cfg.vocab_size}"
        )
    return model, tokenizer


class LoopedScorer:
    """Scores (context, continuation) pairs with `model` run for `loops` rounds and initial-state seed
    `h0_seed`, `batch_size` sequences per forward."""

    def __init__(
        self,
        model,
        tokenizer: Tokenizer,
        *,
        loops: int,
        h0_seed: int,
        batch_size: int,
        device: torch.device,
    ) -> None:
        self.model, self.tokenizer = model.eval(), tokenizer
        self.loops, self.h0_seed, self.batch_size, self.device = loops, h0_seed, batch_size, device
        self.max_length = model.cfg.seq_len
        self.prefix = tokenizer.encode_batch([DOC_SEP])[0]
        self.on_batch: Callable[[int], None] | None = None  # called after every forward (heartbeats)

    def encode_pairs(self, pairs: list[tuple[str, str]]) -> list[TokenRequest]:
        """(context tokens with the separator prefix, continuation tokens) per pair."""
        moved = []
        for context, continuation in pairs:
            spaces = len(context) - len(context.rstrip())
            if spaces:
                context, continuation = context[:-spaces], context[-spaces:] + continuation
            moved.append((context, continuation))
        contexts = self.tokenizer.encode_batch([DOC_SEP + c for c, _ in moved])
        wholes = self.tokenizer.encode_batch([DOC_SEP + c + x for c, x in moved])
        out = []
        for (context, continuation), ctx, whole in zip(moved, contexts, wholes):
            cont = whole[len(ctx) :]
            if not cont:
                raise ValueError(f"continuation {continuation!r} after {context[-40:]!r} has no tokens")
            out.append((ctx, cont))
        return out

    def loglikelihood(self, pairs: list[tuple[str, str]]) -> list[tuple[float, bool]]:
        """(sum of log-probabilities of the continuation, is greedy) per (context, continuation)."""
        return self.score_tokens(self.encode_pairs(pairs))

    def rolling_requests(self, text: str) -> list[TokenRequest]:
        """`text` as disjoint windows of at most `max_length` predicted tokens, each with everything
        before it as context (cut to the window by `score_tokens`): every token is predicted exactly
        once, the first after the separator prefix. Their log-likelihoods sum to the text's."""
        tokens = self.tokenizer.encode_batch([text])[0]
        full = self.prefix + tokens
        start, n = len(self.prefix), len(full)
        return [(full[:at], full[at : at + self.max_length]) for at in range(start, n, self.max_length)]

    def loglikelihood_rolling(self, texts: list[str]) -> list[float]:
        """The log-likelihood of each whole text (after the separator prefix)."""
        windows = [self.rolling_requests(text) for text in texts]
        flat = self.score_tokens([w for ws in windows for w in ws])
        out, at = [], 0
        for ws in windows:
            out.append(sum(ll for ll, _ in flat[at : at + len(ws)]))
            at += len(ws)
        return out

    @torch.no_grad()
    def score_tokens(
        self, requests: list[TokenRequest], on_batch: Callable[[int], None] | None = None
    ) -> list[tuple[float, bool]]:
        """(log-likelihood, is greedy) per (context tokens, continuation tokens), in request order."""
        inputs = []  # per request: (model input tokens, number of continuation tokens)
        for ctx, cont in requests:
            if len(cont) > self.max_length:
                raise ValueError(
                    f"continuation of {len(cont)} tokens is longer than the model's context ({self.max_length})"
                )
            whole = (ctx + cont)[-(self.max_length + 1) :]
            inputs.append((whole[:-1], len(cont)))
        order = sorted(range(len(inputs)), key=lambda i: (-len(inputs[i][0]), i))
        results: list[tuple[float, bool]] = [(0.0, False)] * len(inputs)
        for b, start in enumerate(range(0, len(order), self.batch_size), start=1):
            batch = order[start : start + self.batch_size]
            width = len(inputs[batch[0]][0])  # the longest: sorted by length, descending
            idx = torch.zeros(len(batch), width, dtype=torch.long)  # (B, T), right-padded with token 0
            for row, i in enumerate(batch):
                tokens = inputs[i][0]
                idx[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            with autocast(self.device):
                logits = self.model(idx.to(self.device), loops=self.loops, h0_seed=self.h0_seed).logits
            logprobs = F.log_softmax(logits.float(), dim=-1).cpu()  # (B, T, V)
            for row, i in enumerate(batch):
                n_in, n_cont = len(inputs[i][0]), inputs[i][1]
                target = torch.tensor(requests[i][1], dtype=torch.long)  # (n_cont,)
                rows = logprobs[row, n_in - n_cont : n_in]  # (n_cont, V): the positions predicting it
                picked = rows.gather(-1, target[:, None]).squeeze(-1)
                results[i] = (float(picked.sum()), bool((rows.argmax(-1) == target).all()))
            for callback in (on_batch, self.on_batch):
                if callback is not None:
                    callback(b)
        return results
