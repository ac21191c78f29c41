"""Round scheduling of mixed loop counts: the aligned schedule (at most grad_rounds rounds with
autograd) computes the same loss and gradients as the staggered one; the loop never syncs with the
device (its decisions are Python)."""

from __future__ import annotations

import pytest
import torch

import looplab.families.looped.model as looped
from looplab.families.looped.model import LoopedLM
from looplab.model.errors import ConfigError
from looplab.model.geometry import rel_update
from looplab.model.presets import preset
from looplab.model.rounds import loop_counts, plan_rounds
from tests.model.conftest import forward_states, randomize

COUNTS = [2, 7, 1, 5]


def _idx(B=4, T=24, seed=0):
    return torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(seed))


def _force_staggered(monkeypatch):
    def staggered(counts, grad_rounds, grad_enabled, rounds_share_settings):
        return plan_rounds(counts, grad_rounds, grad_enabled, rounds_share_settings=False)

    monkeypatch.setattr(looped, "plan_rounds", staggered)


def _loss_and_grads(m: LoopedLM, idx, counts, h0_seed):
    m.zero_grad(set_to_none=True)
    if h0_seed is None:
        torch.manual_seed(123)  # fresh h0 from the global RNG: the same draw for both schedules
    loss = m(idx, targets=idx, loops=counts, h0_seed=h0_seed).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("h0_seed", [3, None])
@pytest.mark.parametrize("recipe, grad_rounds", [("parcae", 4), ("parcae_last1", 1), ("parcae", None)])
def test_aligned_schedule_equals_staggered(monkeypatch, recipe, grad_rounds, h0_seed):
    m = randomize(LoopedLM(preset(recipe, "tiny", grad_rounds=grad_rounds)), seed=1)
    idx = _idx()
    loss_a, grads_a = _loss_and_grads(m, idx, COUNTS, h0_seed)
    _force_staggered(monkeypatch)
    loss_s, grads_s = _loss_and_grads(m, idx, COUNTS, h0_seed)
    torch.testing.assert_close(loss_a, loss_s, rtol=1e-5, atol=0)
    assert grads_a.keys() == grads_s.keys() and "B" in grads_a
    for name in grads_s:
        torch.testing.assert_close(grads_a[name], grads_s[name], rtol=1e-5, atol=1e-7, msg=name)


def _rounds_with_autograd(m: LoopedLM, counts) -> list[bool]:
    seen = []
    hook = m.recurrent[0].register_forward_hook(lambda mod, inp, out: seen.append(out.requires_grad))
    idx = _idx()
    m(idx, targets=idx, loops=counts, h0_seed=0).loss.backward()
    hook.remove()
    return seen


def test_aligned_schedule_keeps_autograd_to_the_last_k_rounds(monkeypatch):
    m = LoopedLM(preset("parcae", "tiny"))  # grad_rounds 4
    assert _rounds_with_autograd(m, COUNTS) == [False] * 3 + [True] * 4
    _force_staggered(monkeypatch)  # windows (local rounds): [0,2), [3,7), [0,1), [1,5) -> every round
    assert _rounds_with_autograd(m, COUNTS) == [True] * 7


def test_rounds_that_differ_keep_the_staggered_schedule():
    m = LoopedLM(preset("fixed6_grad3", "tiny"))  # rounds=(full, full): two entries
    assert len(m.cfg.rounds) == 2
    assert _rounds_with_autograd(m, [6, 3, 6, 4]) == [True] * 6  # staggered windows cover every round


def test_plan_aligned_and_staggered():
    aligned = plan_rounds([2, 4], grad_rounds=2, grad_enabled=True, rounds_share_settings=True)
    assert aligned.active == ((False, True), (False, True), (True, True), (True, True))
    assert aligned.need == ((False, False), (False, False), (True, True), (True, True))
    assert aligned.grad == (False, False, True, True) and aligned.all_active == (False, False, True, True)
    staggered = plan_rounds([2, 4], grad_rounds=2, grad_enabled=True, rounds_share_settings=False)
    assert staggered.active == ((True, True), (True, True), (False, True), (False, True))
    assert staggered.need == ((True, False), (True, False), (False, True), (False, True))
    assert staggered.grad == (True, True, True, True)
    no_grad = plan_rounds([2, 4], grad_rounds=2, grad_enabled=False, rounds_share_settings=True)
    assert no_grad.grad == (False,) * 4
    single = plan_rounds(5, grad_rounds=2, grad_enabled=True, rounds_share_settings=True)
    assert single.grad == (False, False, False, True, True) and single.device_masks("cpu") == (None, None)
    active, need = aligned.device_masks("cpu")
    assert active.shape == (4, 2, 1, 1) and active.dtype == torch.bool and need[2].all()


def test_loop_counts_accepts_ints_lists_and_cpu_tensors():
    assert loop_counts(3, 2) == 3
    assert loop_counts([3, 3], 2) == 3  # equal counts collapse to one int
    assert loop_counts((1, 4), 2) == [1, 4]
    assert loop_counts(torch.tensor([2, 5]), 2) == [2, 5]
    for bad, match in [(0, "loops"), ([1, 0], "loops"), (True, "loops"), ([1, 2, 3], "per-sequence")]:
        with pytest.raises(ValueError, match=match):
            loop_counts(bad, 2)
    with pytest.raises(ConfigError, match="loops"):
        LoopedLM(preset("parcae", "tiny"))(_idx(B=2), loops=[1, 0])


def _forbid_host_sync(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("host sync inside the round loop")

    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "nonzero", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.mark.parametrize("recipe", ["parcae", "lean", "fixed6_grad3"])
def test_the_round_loop_never_reads_a_tensor_on_the_host(monkeypatch, recipe):
    """On CPU a read is free, so count the reads instead: once the counts are read (before the loop),
    nothing in the loop turns a tensor into a Python value; with Python counts, nothing in the forward."""
    m = randomize(LoopedLM(preset(recipe, "tiny")), seed=0)
    idx = _idx()
    counts_tensor = torch.tensor(COUNTS)  # the sampler's CPU tensor
    loop = LoopedLM._loop
    seen = []

    def guarded_loop(self, h, counts, one_round, observe=None):
        with monkeypatch.context() as patch:
            _forbid_host_sync(patch)
            return loop(self, h, counts, one_round, seen.append)  # an observer of every round too

    monkeypatch.setattr(LoopedLM, "_loop", guarded_loop)
    out = m(idx, targets=idx, loops=counts_tensor, h0_seed=1)
    out.loss.backward()
    assert len(seen) == 7  # max(COUNTS) rounds, each seen
    monkeypatch.setattr(LoopedLM, "_loop", loop)
    with monkeypatch.context() as patch:  # Python counts: the whole forward is free of reads
        _forbid_host_sync(patch)
        loss = m(idx, targets=idx, loops=list(COUNTS), h0_seed=1).loss
    loss.backward()


def test_in_a_mixed_batch_a_sample_moves_as_in_its_solo_run_and_is_held_after_its_rounds():
    """Per-round geometry per sample: sample 1 (5 rounds) updates as alone; sample 0 (2 rounds) does
    not move in rounds 3-5."""
    m = randomize(LoopedLM(preset("lean", "tiny")), seed=2).eval()
    idx = _idx(B=2)
    with torch.no_grad():
        mixed = forward_states(m, idx, loops=[2, 5], h0_seed=0)  # (6, 2, T, d)
        solo = forward_states(m, idx[1:], loops=5, h0_seed=0)
    assert mixed.shape[0] == solo.shape[0] == 6
    torch.testing.assert_close(rel_update(mixed[:, 1:]), rel_update(solo), rtol=1e-5, atol=1e-6)
    assert (rel_update(mixed[2:, :1]) == 0).all()  # rounds 3-5 of sample 0: held, exactly
