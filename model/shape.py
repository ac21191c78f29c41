"""The run's shape: what every run has whatever its model family — the vocabulary, the context length,
the loop count, the sequences per optimizer step and the tokens it trains on — as one frozen type,
checked once when it is made.

Submission (the family's conformance check), the planner (a family's FLOPs and memory) and the trainer
(the family's module, its automatic micro-batch) all read a family's config from a `RunShape`
(`model.contract.family_settings`), so the three cannot disagree. looplab's own model carries the same
figures inside its `ModelConfig` (`RunShape.of_config`); another family states them as its spec's own
keys (`seq_len`, `loops`, `batch_size`, the budget), with no recipe or size of looplab's.

Pure Python, no torch: a grid is validated without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from looplab.model import fields

# A family's shape when its spec leaves a figure out: the figures a family run without a recipe or
# size had before families stated their own shape (the `lean` recipe's 4 loops, the `tiny` size's 64
# tokens of context and 8 sequences per step), so such a run trains the same model as it did.
FAMILY_SEQ_LEN = 64
FAMILY_LOOPS = 4
FAMILY_BATCH = 8


@dataclass(frozen=True)
class RunShape:
    """vocab_size: tokens of the tokenizer; seq_len: tokens per sequence (the model's context);
    loops: the fixed loop count (the mean of a sampled one); batch_size: sequences per optimizer step;
    tokens: the tokens a token or FLOP budget trains (None: a time budget, or no training)."""

    vocab_size: int
    seq_len: int
    loops: int
    batch_size: int = 1
    tokens: int | None = None

    def __post_init__(self) -> None:
        s = object.__setattr__  # frozen: store the normalised values
        s(self, "vocab_size", fields.integer("vocab_size", self.vocab_size, lo=2))
        s(self, "seq_len", fields.integer("seq_len", self.seq_len, lo=2))
        s(self, "loops", fields.integer("loops", self.loops, lo=1))
        s(self, "batch_size", fields.integer("batch_size", self.batch_size, lo=1))
        s(self, "tokens", fields.integer("tokens", self.tokens, lo=1, allow_none=True))

    @classmethod
    def of_config(cls, cfg: Any, batch_size: int = 1, tokens: int | None = None) -> RunShape:
        """The shape of looplab's own model at `cfg` (a ModelConfig)."""
        return cls(cfg.vocab_size, cfg.seq_len, cfg.loops, batch_size, tokens)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def model_config(self):
        """The ModelConfig a run of another family is held at by the code that reads a run's figures
        from one (checkpoints, evaluations): the defaults at this vocabulary, context and fixed loop
        count. None of its other fields describes the family's model."""
        from looplab.model.config import ModelConfig

        return ModelConfig(vocab_size=self.vocab_size, seq_len=self.seq_len, loops=self.loops)
