"""The Huginn-style family's configuration: a small dataclass, its checks, and the published model's.

`PUBLISHED` is the configuration of the published Huginn-0125 checkpoint (3.5B parameters): the
`RavenConfig` defaults of seal-rg/recurrent-pretraining `recpre/raven_config_minimal.py` (n_embd 5280,
55 heads, 2 prelude + 4 core + 2 coda sandwich blocks, a gated SiLU MLP of 17,920, a 65,536-token
vocabulary, tied embeddings, q/k biases, RoPE base 50,000, a 4,096-token context, mean recurrence 32
with backprop through the last 8), which is also the `config.json` of the hub model
tomg-group-umd/huginn-0125 and Table 1 / section 4 of Geiping et al., arXiv:2502.05171.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from looplab.model import fields


@dataclass(frozen=True)
class HuginnConfig:
    vocab_size: int
    seq_len: int
    d_model: int = 32
    n_heads: int = 2
    mlp: int = 64  # the gated MLP's hidden width (its fc layer is d_model x 2 * mlp)
    n_prelude: int = 1
    n_core: int = 2  # sandwich blocks in the recurrent core
    n_coda: int = 1
    mean_recurrence: int = 4  # the training sampler's mean recurrence count
    backprop_depth: int = 2  # recurrences with gradient in training (truncated backprop)
    max_recurrence: int = 0  # the training sampler's cap; 0 = 4 x mean_recurrence
    rope_base: float = 50_000.0
    norm_eps: float = 1e-6
    qk_bias: bool = True
    tie_embeddings: bool = True

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def init_std(self) -> float:
        """The state's and weights' base std, sqrt(2 / (5 d)) (the public code's `init_values["std"]`)."""
        return (2 / (5 * self.d_model)) ** 0.5

    @property
    def embed_scale(self) -> float:
        return self.d_model**0.5

    @property
    def sampler_cap(self) -> int:
        return self.max_recurrence or 4 * self.mean_recurrence

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> HuginnConfig:
        check(config)
        return cls(**config)


def check(config: dict[str, Any]) -> None:
    """ConfigError naming the field and what is accepted; `vocab_size` and `seq_len` are looplab's."""
    counts = ("n_prelude", "n_coda", "max_recurrence")  # may be 0
    fields.family_settings(HuginnConfig, config, counts=counts, positive=("rope_base", "norm_eps"))


# The published Huginn-0125 (see the module docstring for the source).
PUBLISHED: dict[str, Any] = {
    "vocab_size": 65536,
    "seq_len": 4096,
    "d_model": 5280,
    "n_heads": 55,
    "mlp": 17920,
    "n_prelude": 2,
    "n_core": 4,
    "n_coda": 2,
    "mean_recurrence": 32,
    "backprop_depth": 8,
    "rope_base": 50_000.0,
    "norm_eps": 1e-6,
    "qk_bias": True,
    "tie_embeddings": True,
}
# The recurrence counts the planner is given the published model's cost at.
PLANNER_RECURRENCES = (4, 8, 16, 32, 64)
