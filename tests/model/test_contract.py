"""The model-family contract (model/contract/): resolving a family, discovering its capabilities,
the conformance check refusing each way a family can break the contract, and `build_model`."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from looplab.families.looped.model import LoopedLM
from looplab.model.config import ModelConfig
from looplab.model.contract import (
    BUILTIN,
    LOOPED_CAPABILITIES,
    FamilyError,
    FamilyLM,
    build_model,
    capabilities,
    check_family,
    measure_flops_per_token,
    resolve_family,
)
from looplab.model.init import RowKey

HERE = "tests.model.test_contract"
CONFIG = {"vocab_size": 11, "seq_len": 8, "d": 8}


class Tiny(nn.Module):
    """A minimal conforming family: a residual MLP applied `loops` times, with zero-initialised output
    (so at init the loop is invisible, as in many real models)."""

    def __init__(self, vocab_size: int, d: int) -> None:
        super().__init__()
        self.emb, self.fc = nn.Embedding(vocab_size, d), nn.Linear(d, d)
        self.head = nn.Linear(d, vocab_size)
        nn.init.zeros_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, idx, loops: int = 1):
        h = self.emb(idx)
        for _ in range(loops):
            h = h + torch.tanh(self.fc(h))
        return self.head(h)


def tiny(config):
    return Tiny(config["vocab_size"], config.get("d", 8))


class Rich(Tiny):
    """Every optional capability, and a forward whose randomness is keyed per row."""

    def forward(self, idx, loops: int = 1, row_key=None):
        self.seen_key = row_key
        return super().forward(idx, loops)

    def sample_loops(self, batch, step, seed):
        return torch.arange(batch) % 2 + 1

    def round_states(self, idx, loops, skip_round=None):
        return torch.zeros(loops + 1, *idx.shape, 8)

    def flops_per_token(self, loops):
        return 42.0

    def param_groups(self):
        return {
            "matrix": [self.fc.weight],
            "other": [p for p in self.parameters() if p is not self.fc.weight],
        }


def rich(config):
    return Rich(config["vocab_size"], config.get("d", 8))


class Dropping(Tiny):
    def forward(self, idx, loops: int = 1):
        return torch.nn.functional.dropout(super().forward(idx, loops), 0.5, self.training)


def dropping(config):
    return Dropping(config["vocab_size"], 8)


def raises(config):
    raise RuntimeError("no such width")


def not_a_module(config):
    return lambda idx, loops=1: torch.zeros(*idx.shape, config["vocab_size"])


class NoLoops(Tiny):
    def forward(self, idx):
        return super().forward(idx, 1)


def no_loops(config):
    return NoLoops(config["vocab_size"], 8)


class WrongShape(Tiny):
    def forward(self, idx, loops: int = 1):
        return super().forward(idx, loops)[:, -1]


def wrong_shape(config):
    return WrongShape(config["vocab_size"], 8)


class WrongDtype(Tiny):
    def forward(self, idx, loops: int = 1):
        return super().forward(idx, loops).argmax(-1, keepdim=True).expand(-1, -1, self.head.out_features)


def wrong_dtype(config):
    return WrongDtype(config["vocab_size"], 8)


class IgnoresLoops(Tiny):
    def forward(self, idx, loops: int = 1):
        return super().forward(idx, 1)


def ignores_loops(config):
    return IgnoresLoops(config["vocab_size"], 8)


def validated(config):
    return Tiny(config["vocab_size"], config["d"])


def _validate(config):
    if config.get("d", 0) % 2:
        raise ValueError(f"d: expected an even width; got {config.get('d')}")


validated.validate_config = _validate


def test_a_conforming_family_passes_and_reports_its_fallbacks():
    report = check_family(f"{HERE}:tiny", CONFIG)
    assert report.family == f"{HERE}:tiny" and report.vocab_size == 11
    assert not report.split_dependent
    assert set(report.fallbacks()) == {
        "sample_loops",
        "row_key",
        "round_states",
        "readout",
        "exit_gate",
        "training_loss",
        "kv_cache",
        "kv_exits",
        "flops_per_token",
        "param_groups",
        "param_split",
        "validate_config",
    }


def test_capabilities_are_discovered_by_name_and_signature():
    caps = check_family(f"{HERE}:rich", CONFIG).capabilities
    assert caps.sample_loops and caps.row_key and caps.round_states and caps.flops_per_token
    assert caps.param_groups and not caps.kv_cache and not caps.readout and not caps.param_split


def test_looped_lm_is_the_builtin_family_with_every_capability():
    cfg = ModelConfig(vocab_size=13, d_model=16, n_heads=1, head_dim=16, n_prelude=1, n_recurrent=1, n_coda=1)
    report = check_family(BUILTIN, cfg.to_dict())
    # every capability but the learned exit, which only a model built with an exit gate has
    assert set(report.fallbacks()) == {"exit_gate"} and not report.split_dependent
    built = build_model(cfg)
    assert type(built.module) is LoopedLM and built.builtin  # no wrapper on looplab's own path
    assert built.capabilities == capabilities(built.module) and not built.capabilities.exit_gate
    gated = dataclasses.replace(cfg, exit_gate="entropy")
    assert check_family(BUILTIN, gated.to_dict()).fallbacks() == {}
    assert build_model(gated).capabilities == LOOPED_CAPABILITIES == capabilities(build_model(gated).module)


def test_a_random_forward_without_row_key_is_split_dependent():
    assert check_family(f"{HERE}:dropping", CONFIG).split_dependent


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("no_such_package_xyz.models:make", "does not import"),
        (f"{HERE}:missing", "has no callable 'missing'"),
        ("not-registered", "not registered in entry-point group 'looplab.models'"),
        (f"{HERE}:raises", "the factory raised RuntimeError: no such width"),
        (f"{HERE}:not_a_module", "expected a torch.nn.Module"),
        (f"{HERE}:no_loops", "takes no `loops`"),
        (f"{HERE}:wrong_shape", "expected a tensor of shape (B, T, V) = (2, 4, 11)"),
        (f"{HERE}:wrong_dtype", "expected float"),
        (f"{HERE}:ignores_loops", "same logits at loops=1 and loops=2"),
    ],
)
def test_a_bad_family_is_refused_naming_it_and_what_was_expected(name, expected):
    with pytest.raises(FamilyError) as e:
        check_family(name, CONFIG)
    assert f"family {name!r}" in str(e.value) and expected in str(e.value)


def test_a_zero_initialised_loop_is_not_mistaken_for_an_ignored_one():
    model = tiny(CONFIG).eval()
    idx = torch.randint(0, 11, (2, 4))
    assert torch.equal(model(idx, loops=1), model(idx, loops=2))  # at init the loop is invisible...
    check_family(f"{HERE}:tiny", CONFIG)  # ...and the check, on a randomised copy, still passes


def test_the_family_config_validation_is_reported_with_the_family():
    assert check_family(f"{HERE}:validated", {**CONFIG, "d": 4}).capabilities.validate_config
    with pytest.raises(FamilyError, match=r"family '.*:validated': family_config: d: expected an even width"):
        check_family(f"{HERE}:validated", {**CONFIG, "d": 3})


def test_config_without_a_vocabulary_is_refused():
    with pytest.raises(FamilyError, match="vocab_size: expected an int >= 2"):
        check_family(f"{HERE}:tiny", {"d": 8})


def _cfg(**kw):
    return ModelConfig(vocab_size=11, seq_len=8, d_model=8, n_heads=1, head_dim=8, **kw)


def test_build_model_wraps_another_family_with_the_fallbacks():
    built = build_model(_cfg(loops=3), f"{HERE}:tiny", {"d": 8})
    model = built.module
    assert isinstance(model, FamilyLM) and not built.builtin
    assert model.sample_loops(4, 0, 0).tolist() == [3, 3, 3, 3]  # no sampler: the fixed loops
    groups = model.param_groups()
    assert groups["matrix"] == [] and len(groups["other"]) == len(list(model.parameters()))
    idx, y = torch.randint(0, 11, (3, 8)), torch.randint(0, 11, (3, 8))
    out = model(idx, targets=y)
    assert out.logits.shape == (3, 8, 11) and out.logits.dtype == torch.float32 and out.loss.ndim == 0


def test_mixed_loop_counts_run_each_row_at_its_own_count_with_its_own_key():
    built = build_model(_cfg(), f"{HERE}:rich", {})
    model = randomize_all(built.module)
    idx = torch.randint(0, 11, (4, 8))
    counts = model.sample_loops(4, 0, 0)
    assert counts.tolist() == [1, 2, 1, 2]  # the family's own sampler
    mixed = model(idx, loops=counts, h0_seed=RowKey(0, 5, (10, 11, 12, 13))).logits
    assert model.inner.seen_key == RowKey(0, 5, (11, 13))  # the last forward: the rows of count 2
    solo = model(idx[1:2], loops=2).logits
    assert torch.allclose(mixed[1:2], solo, atol=1e-6)
    assert not torch.allclose(mixed[0:1], model(idx[0:1], loops=2).logits, atol=1e-3)


def randomize_all(model):
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model


def test_flops_are_measured_when_the_family_gives_none():
    model = tiny(CONFIG)
    one, two = (measure_flops_per_token(model, 11, 8, n) for n in (1, 2))
    d, v = 8, 11
    assert one == pytest.approx(3 * 2 * (d * d + d * v))  # one round + head, x3 for the backward
    assert two - one == pytest.approx(3 * 2 * d * d)


def test_measured_flops_see_a_torch_encoder_layer_in_eval_mode():
    """nn.TransformerEncoderLayer's eval fast path is one fused kernel the counter does not see: the
    measurement takes the plain path, so the example family's block is counted, not its head alone."""
    from looplab.examples.universal_transformer import factory

    model = factory({"vocab_size": 16, "seq_len": 8, "d_model": 8, "n_heads": 2}).eval()
    d, v, T = 8, 16, 8
    block = 2 * (4 * d * d + 2 * 4 * d * d) + 4 * d * T  # q, k, v, out; the 4d MLP; attention scores
    one, two = (measure_flops_per_token(model, v, T, n) for n in (1, 2))
    assert two - one >= 3 * 2 * (4 * d * d + 2 * 4 * d * d)  # a round's matmuls at least
    assert one >= 3 * 2 * d * v + (two - one) and (two - one) <= 3 * block
    assert torch.backends.mha.get_fastpath_enabled() and not model.training  # both restored


def test_resolving_the_builtin_family_names_its_package():
    fam = resolve_family(None)
    assert fam.builtin and fam.name == BUILTIN and fam.package == "looplab"
