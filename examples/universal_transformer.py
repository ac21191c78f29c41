"""A universal transformer as a looplab model family: one shared causal transformer block applied
`loops` times, with a learned round embedding added to the state before each round. Written against
docs/own-model.md only. No positional embedding: the causal mask orders the tokens, so the model runs
at any context length (the decode benchmark's recompute goes past the training length).

In a grid: {"family": "examples.universal_transformer:factory", "family_config": {"d_model": 32}}.
"""

from __future__ import annotations

import torch
from torch import nn

MAX_ROUNDS = 64  # rounds past this reuse the last round's embedding


class UniversalTransformer(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.rounds = nn.Embedding(MAX_ROUNDS, d_model)
        self.block = nn.TransformerEncoderLayer(
            d_model, n_heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        nn.init.normal_(self.rounds.weight, std=0.02)

    def _round(self, h: torch.Tensor, r: int, mask: torch.Tensor) -> torch.Tensor:
        return self.block(h + self.rounds.weight[min(r, MAX_ROUNDS - 1)], src_mask=mask, is_causal=True)

    def _mask(self, idx: torch.Tensor) -> torch.Tensor:
        return nn.Transformer.generate_square_subsequent_mask(idx.shape[1], device=idx.device)

    def forward(self, idx: torch.Tensor, loops: int = 4) -> torch.Tensor:
        h, mask = self.embed(idx), self._mask(idx)
        for r in range(loops):
            h = self._round(h, r, mask)
        return self.head(self.norm(h))

    @torch.no_grad()
    def round_states(self, idx: torch.Tensor, loops: int, skip_round: int | None = None) -> torch.Tensor:
        """The state before the rounds and after each: (loops + 1, B, T, d); round `skip_round` (0-based)
        replaced by the identity."""
        h, mask = self.embed(idx), self._mask(idx)
        states = [h]
        for r in range(loops):
            h = h if r == skip_round else self._round(h, r, mask)
            states.append(h)
        return torch.stack(states)


def validate_config(config: dict) -> None:
    d, heads = config.get("d_model", 32), config.get("n_heads", 2)
    if not isinstance(d, int) or not isinstance(heads, int) or heads < 1 or d % heads:
        raise ValueError(f"d_model, n_heads: expected ints with n_heads dividing d_model; got {d}, {heads}")


def factory(config: dict) -> UniversalTransformer:
    validate_config(config)
    return UniversalTransformer(config["vocab_size"], config.get("d_model", 32), config.get("n_heads", 2))


factory.validate_config = validate_config
