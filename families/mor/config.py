"""The MoR-style family's configuration: a small dataclass and its checks.

Mixture-of-Recursions (Bae et al., arXiv:2507.10524; public code raymin0223/mixture_of_recursions):
a unique first and last layer around a block of shared layers applied up to `loops` recursions
("middle-cycle" sharing), each token's recursion depth chosen by a router: `expert` choice (at each
recursion a router picks the top share of the still-active tokens, the share falling by a capacity
schedule; an auxiliary loss teaches the router's sigmoid to agree with the top-k, so inference can
decide token by token) or `token` choice (one router assigns every token its depth up front; a
balancing loss spreads the tokens over the depths). `kv`: `recursion` (each recursion attends to the
keys and values of the tokens it selected) or `share_first` (every recursion reuses the first
recursion's keys and values: recursion KV sharing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from looplab.model import fields

ROUTERS = ("expert", "token")
KV = ("recursion", "share_first")


@dataclass(frozen=True)
class MoRConfig:
    vocab_size: int
    seq_len: int
    d_model: int = 32
    n_heads: int = 2
    mlp: int = 64
    n_shared: int = 1  # layers in the shared recursion block
    max_recursions: int = 4  # routers are built for up to this many recursions
    router: str = "expert"
    kv: str = "recursion"
    aux_coef: float = 0.001  # expert choice: the router's BCE against its top-k selection
    balance_coef: float = 0.01  # token choice: the load-balancing loss
    rope_base: float = 10_000.0
    norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> MoRConfig:
        check(config)
        return cls(**config)


def check(config: dict[str, Any]) -> None:
    """ConfigError naming the field and what is accepted; `vocab_size` and `seq_len` are looplab's."""
    fields.family_settings(
        MoRConfig, config, positive=("rope_base", "norm_eps"), choices={"router": ROUTERS, "kv": KV}
    )
