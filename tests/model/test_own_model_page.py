"""docs/own-model.md's "A complete family from this page": its code blocks, extracted from the page (not
copied), are one module that passes the conformance check with every optional capability present;
its exit path is its forward at fixed depth and its decode cache with per-token exits; its training
objective reaches the train step through the contract (one call per loop count, weighted by rows);
and `looplab family check` accepts it from the directory it is saved in."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from looplab.model.contract import build_model, check_family
from looplab.model.exits import exit_forward, family_exit_forward
from looplab.model.presets import preset

PAGE = Path(__file__).resolve().parents[2] / "docs" / "own-model.md"
SECTION = "## A complete family from this page"


def page_code() -> str:
    """The section's ```python blocks, in order, joined."""
    text = PAGE.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) >= 5, "the page's family is its code blocks"
    return "\n\n".join(blocks)


@pytest.fixture
def page_family(tmp_path, monkeypatch):
    (tmp_path / "page_family.py").write_text(page_code())
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "page_family:factory"
    import sys

    sys.modules.pop("page_family", None)


def _built(name: str, loops: int = 3):
    cfg = preset("fixed4", "tiny", vocab_size=32, seq_len=16, loops=loops)
    torch.manual_seed(0)
    return build_model(cfg, name, {"d_model": 16}).module


def test_the_pages_family_passes_the_check_with_every_capability(page_family):
    report = check_family(page_family, {"vocab_size": 32, "seq_len": 16}, loops=2)
    assert report.fallbacks() == {} and report.kv_strategies == ("full", "shared")
    assert not report.split_dependent and not report.flops_measured


def test_its_exit_path_is_its_forward_and_its_full_cache_with_exits(page_family):
    lm = _built(page_family).eval()
    idx = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        at3 = lm(idx, loops=3).logits
        fixed = exit_forward(lm, idx, h0_seed=0, exits=torch.full(idx.shape, 3), max_rounds=3)
        assert torch.equal(fixed.logits, at3)
        exits = torch.randint(1, 4, idx.shape, generator=torch.Generator().manual_seed(2))
        parallel = exit_forward(lm, idx, h0_seed=0, exits=exits, max_rounds=3)
        stepped = family_exit_forward(lm, idx, h0_seed=0, exits=exits, max_rounds=3, strategy="full")
        torch.testing.assert_close(stepped.logits, parallel.logits, rtol=1e-5, atol=1e-5)
        assert not torch.allclose(parallel.logits, at3, atol=1e-4)  # the exits changed the function
        inner = lm.inner
        for strategy in ("full", "shared"):
            cache = inner.setup_cache(2, 9, loops=3, strategy=strategy)
            assert cache.nbytes() == inner.kv_cache_bytes(2, 9, loops=3, strategy=strategy)
            first = inner.prefill(idx[:, :4], cache)
            decoded = torch.cat(
                [first, torch.stack([inner.decode_step(idx[:, t], cache) for t in range(4, 9)], 1)], 1
            )
            same = torch.allclose(decoded, at3, atol=1e-5)
            assert same == (strategy == "full")  # shared keys: another function past one round


def test_its_own_objective_is_the_train_steps_loss_weighted_by_rows(page_family):
    lm = _built(page_family).train()
    idx, y = (torch.randint(0, 32, (4, 8), generator=torch.Generator().manual_seed(s)) for s in (3, 4))
    out = lm(idx, targets=y, loops=torch.tensor([1, 1, 2, 2]))
    low, high = (
        lm.inner.training_loss(idx[r], y[r], loops=n).loss for r, n in ((slice(0, 2), 1), (slice(2, 4), 2))
    )
    torch.testing.assert_close(out.loss, 0.5 * low + 0.5 * high)
    plain = torch.nn.functional.cross_entropy(out.logits.transpose(1, 2), y)
    assert not torch.allclose(out.loss, plain)  # not the fallback: the family's own objective
    lm.eval()  # evaluation reads the forward's logits
    torch.testing.assert_close(
        lm(idx, targets=y, loops=2).loss,
        torch.nn.functional.cross_entropy(lm.inner(idx, loops=2).transpose(1, 2), y),
    )


def test_family_check_accepts_it_from_the_directory_it_is_saved_in(tmp_path, monkeypatch, capsys):
    from looplab.lab.cli import main

    (tmp_path / "page_family.py").write_text(page_code())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    try:
        assert main(["family", "check", "page_family:factory"]) == 0
    finally:
        __import__("sys").modules.pop("page_family", None)
    out = capsys.readouterr().out
    assert "conforms" in out and "fallback  " not in out  # every row present
