"""The Ouro-style family's configuration: a small dataclass and its checks.

Ouro (Zhu et al., "Scaling Latent Reasoning via Looped Language Models", arXiv:2510.25741; public
modeling code `modeling_ouro.py` beside the ByteDance/Ouro-1.4B and -2.6B checkpoints) loops one
whole decoder stack `total_ut_steps` times (no prelude, no coda) and trains an exit gate with an
entropy-regularised objective (stage I), then tunes the gate alone on the loss improvement between
steps (stage II). `objective` picks the stage the train job runs; `init_from` starts a run from
another run's weights (stage II from stage I's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from looplab.model import fields

OBJECTIVES = ("entropy", "gate_tuning")


@dataclass(frozen=True)
class OuroConfig:
    vocab_size: int
    seq_len: int
    d_model: int = 32
    n_heads: int = 2
    mlp: int = 64  # the gated MLP's hidden width
    n_layers: int = 2  # decoder layers in the looped stack
    max_loops: int = 4  # the KV cache's default loop count (the published total_ut_steps)
    rope_base: float = 10_000.0
    norm_eps: float = 1e-6
    tie_embeddings: bool = False
    objective: str = "entropy"  # stage I (entropy-regularised) or stage II (gate tuning, LM frozen)
    entropy_coef: float = 0.05  # β of stage I: Σ p(t) L_t − β H(p) (a KL to the uniform prior)
    gate_k: float = 50.0  # stage II: the continuation label σ(k (I_t − γ)), I_t the loss improvement
    gate_gamma: float = 0.005
    init_from: str = ""  # stage II: a looplab checkpoint (final.pt, or its run directory) of a stage I run

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> OuroConfig:
        check(config)
        return cls(**config)


def check(config: dict[str, Any]) -> None:
    """ConfigError naming the field and what is accepted; `vocab_size` and `seq_len` are looplab's."""
    fields.family_settings(
        OuroConfig,
        config,
        positive=("rope_base", "norm_eps", "gate_k"),
        choices={"objective": OBJECTIVES},
        texts={"init_from": "a checkpoint path (a string)"},
    )
