"""The optimizers a run can build: names and defaults, parameter groups, the lr/weight-decay schedule,
exact resume through a checkpoint, torch_muon's CPU orthogonalisation, and no patching of torch."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from looplab.model.errors import ConfigError
from looplab.model.names import Optimizer
from looplab.workers.train import optim
from looplab.workers.train import spec as train_spec
from looplab.workers.train.muon import ParcaeMuonAdamW, TorchMuon
from looplab.workers.train.orthogonalise import newton_schulz

REPO = Path(__file__).resolve().parents[2]


class TinyNet(nn.Module):
    """Embedding → gated MLP → head, with `param_groups()` shaped like the LoopedLM's."""

    def __init__(self, with_gate: bool = True) -> None:
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.up = nn.Linear(8, 12, bias=False)  # tall (12, 8)
        self.down = nn.Linear(12, 8, bias=False)  # wide (8, 12)
        self.gate = nn.Linear(4, 2, bias=False) if with_gate else None
        self.norm = nn.Parameter(torch.ones(8))
        self.head = nn.Linear(8, 16)

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        groups = {"matrix": [self.up.weight, self.down.weight]}
        if self.gate is not None:
            groups["ve_gate"] = [self.gate.weight]
        groups["other"] = [self.emb.weight, self.norm, self.head.weight, self.head.bias]
        return groups

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens[:, :-1])  # (B, T, 8)
        if self.gate is not None:
            h = h * 2 * torch.sigmoid(self.gate(h[..., :4])).mean(-1, keepdim=True)
        h = (h + self.down(torch.relu(self.up(h)))) * self.norm
        return nn.functional.cross_entropy(self.head(h).flatten(0, 1), tokens[:, 1:].flatten())


def _batch(step: int) -> torch.Tensor:
    return torch.randint(0, 16, (4, 9), generator=torch.Generator().manual_seed(100 + step))


def _train(model, opts, steps: range, total: int) -> list[float]:
    losses = []
    for step in steps:
        optim.set_lr(opts, optim.lr_factor(step, total), progress=step / total)
        loss = model.loss(_batch(step))
        loss.backward()
        for opt in opts:
            opt.step()
        for opt in opts:
            opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


# ----------------------------------------------------------------------------------- names, groups
def test_names_and_defaults():
    # the names specs store: the enum's values, spelled once (workers/train/spec.py)
    assert [str(o) for o in Optimizer] == ["parcae", "torch_muon", "adamw"]
    assert train_spec.Spec().optimizer == "parcae" and set(optim.DEFAULTS) == set(Optimizer)
    (opt,) = optim.build_optimizers(TinyNet(), "parcae", None, None, None)
    muon_group, adamw_group = opt.param_groups
    assert isinstance(opt, ParcaeMuonAdamW)
    assert (muon_group["kind"], muon_group["lr"], muon_group["weight_decay"]) == ("muon", 8e-3, 0.2)
    assert (
        muon_group["momentum_start"],
        muon_group["momentum_end"],
        muon_group["momentum_warmup_steps"],
    ) == (
        0.85,
        0.95,
        300,
    )
    assert muon_group["ns_steps"] == 5 and muon_group["beta2"] == 0.95 and muon_group["skip_first_step"]
    assert (adamw_group["kind"], adamw_group["lr"], adamw_group["weight_decay"]) == ("adamw", 8e-3, 0.0)
    assert adamw_group["betas"] == (0.8, 0.95) and adamw_group["eps"] == 1e-10
    muon_opt, adamw_opt = optim.build_optimizers(TinyNet(), "torch_muon", None, None, None)
    assert isinstance(muon_opt, TorchMuon) and muon_opt.param_groups[0]["lr"] == 0.02
    assert muon_opt.param_groups[0]["weight_decay"] == 0.0 and adamw_opt.param_groups[0]["lr"] == 3e-3
    (adamw,) = optim.build_optimizers(TinyNet(), "adamw", None, None, None)
    assert [g["lr"] for g in adamw.param_groups] == [3e-3, 3e-3]
    (custom,) = optim.build_optimizers(TinyNet(), "parcae", 0.01, 0.002, 0.1)
    assert [(g["lr"], g["weight_decay"]) for g in custom.param_groups] == [(0.01, 0.1), (0.002, 0.0)]


@pytest.mark.parametrize("with_gate", [True, False])
def test_parameter_groups(with_gate):
    net = TinyNet(with_gate)
    matrix, other = (
        [net.up.weight, net.down.weight],
        [net.emb.weight, net.norm, net.head.weight, net.head.bias],
    )
    gates = [net.gate.weight] if with_gate else []

    def ids(params):
        return [id(p) for p in params]

    (parcae,) = optim.build_optimizers(net, "parcae", None, None, None)
    assert ids(parcae.param_groups[0]["params"]) == ids(matrix + gates)  # gates go to Muon
    assert ids(parcae.param_groups[1]["params"]) == ids(other)
    # gates stay with AdamW, in `model.parameters()` order: the order of older checkpoints
    rest = [net.norm, net.emb.weight, *gates, net.head.weight, net.head.bias]
    assert ids(rest) == [id(p) for p in net.parameters() if all(p is not m for m in matrix)]
    muon_opt, adamw_opt = optim.build_optimizers(net, "torch_muon", None, None, None)
    assert ids(muon_opt.param_groups[0]["params"]) == ids(matrix)
    assert ids(adamw_opt.param_groups[0]["params"]) == ids(rest)
    (adamw,) = optim.build_optimizers(net, "adamw", None, None, None)
    assert [ids(g["params"]) for g in adamw.param_groups] == [ids(matrix), ids(rest)]


def test_frozen_parameters_are_left_out():
    net = TinyNet()
    net.norm.requires_grad_(False)
    (opt,) = optim.build_optimizers(net, "parcae", None, None, None)
    assert all(p is not net.norm for g in opt.param_groups for p in g["params"])


def test_looped_model_parameters_each_land_in_exactly_one_group():
    from looplab.families.looped.model import LoopedLM
    from looplab.model.presets import preset

    model = LoopedLM(preset("parcae", "tiny"))
    for name in Optimizer:
        opts = optim.build_optimizers(model, name, None, None, None)
        seen = [id(p) for opt in opts for g in opt.param_groups for p in g["params"]]
        assert sorted(seen) == sorted(id(p) for p in model.parameters()), name


def test_bad_input_names_the_field():
    with pytest.raises(ConfigError, match="optimizer: unknown 'sgd'; accepted: parcae, torch_muon, adamw"):
        optim.build_optimizers(TinyNet(), "sgd", None, None, None)
    with pytest.raises(ConfigError, match="lr: must be > 0"):
        optim.build_optimizers(TinyNet(), "parcae", -1.0, None, None)
    with pytest.raises(ConfigError, match="adam_lr"):
        optim.build_optimizers(TinyNet(), "parcae", None, "fast", None)
    with pytest.raises(ConfigError, match="weight_decay: must be >= 0"):
        optim.build_optimizers(TinyNet(), "parcae", None, None, -0.1)


def test_old_name_muon_still_builds_torch_muon():
    muon_opt, _ = optim.build_optimizers(TinyNet(), "muon", None, None, None)
    assert isinstance(muon_opt, TorchMuon)


# ---------------------------------------------------------------------------------------- schedule
def test_set_lr_scales_lr_and_decays_parcae_weight_decay_with_progress():
    (opt,) = optim.build_optimizers(TinyNet(), "parcae", None, None, None)
    muon_group, adamw_group = opt.param_groups
    for progress, wd in [(0.0, 0.2), (0.25, 0.15), (0.5, 0.1), (1.0, 0.0), (1.5, 0.0)]:
        assert optim.set_lr([opt], 0.5, progress) == pytest.approx(4e-3)
        assert muon_group["weight_decay"] == pytest.approx(wd) and adamw_group["weight_decay"] == 0.0
        assert adamw_group["lr"] == pytest.approx(4e-3)
    opts = optim.build_optimizers(TinyNet(), "torch_muon", None, None, 0.1)
    assert optim.set_lr(opts, 0.25, 0.9) == pytest.approx(0.005)
    assert opts[0].param_groups[0]["weight_decay"] == 0.1  # torch_muon keeps a constant decay


def test_lr_factor_reaches_zero_on_the_last_step():
    factors = [optim.lr_factor(s, 10, warmup_steps=2, cooldown_frac=0.5) for s in range(10)]
    assert factors[:2] == [0.5, 1.0] and factors[4] == 1.0 and factors[-1] == 0.0
    assert all(a >= b for a, b in zip(factors[2:], factors[3:], strict=False))


# -------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("name", list(Optimizer))
def test_each_optimizer_trains(name):
    torch.manual_seed(0)
    net = TinyNet()
    opts = optim.build_optimizers(net, name, None, None, None)
    fixed = _batch(0)
    start = net.loss(fixed).item()
    for step in range(30):
        optim.set_lr(opts, 1.0, step / 30)
        net.loss(fixed).backward()
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
    assert net.loss(fixed).item() < 0.85 * start


@pytest.mark.parametrize("name", list(Optimizer))
def test_resume_through_a_checkpoint_is_bit_identical(name):
    total, split = 8, 3

    def fresh():
        torch.manual_seed(0)
        net = TinyNet()
        return net, optim.build_optimizers(net, name, None, None, None)

    net, opts = fresh()
    _train(net, opts, range(total), total)
    straight = [p.detach().clone() for p in net.parameters()]

    net, opts = fresh()
    _train(net, opts, range(split), total)
    buffer = io.BytesIO()
    torch.save({"model": net.state_dict(), "opts": [o.state_dict() for o in opts]}, buffer)
    del net, opts
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    net, opts = fresh()
    _train(net, opts, range(1), total)  # the new process's state differs until the load replaces it
    net.load_state_dict(saved["model"])
    for opt, state in zip(opts, saved["opts"], strict=True):
        opt.load_state_dict(state)
    _train(net, opts, range(split, total), total)
    for ours, theirs in zip(net.parameters(), straight, strict=True):
        assert torch.equal(ours.detach(), theirs)


def test_parcae_checkpoint_holds_the_warm_up_and_skip_state():
    net = TinyNet()
    (opt,) = optim.build_optimizers(net, "parcae", None, None, None)
    _train(net, [opt], range(3), 10)
    state = opt.state_dict()
    assert [g["calls"] for g in state["param_groups"]] == [3, 3]
    assert state["param_groups"][0]["momentum"] == pytest.approx(0.85 + 2 * 0.1 / 300)
    assert state["param_groups"][0]["weight_decay"] == pytest.approx(0.2 * 0.8)
    assert {"momentum_buffer", "second_moment"} <= set(state["state"][0])


# ------------------------------------------------------------------------------------- torch_muon
def test_cpu_newton_schulz_is_fp32_and_agrees_with_torchs_bf16():
    from torch.optim import _muon

    g = torch.Generator().manual_seed(0)
    for shape in [(64, 256), (256, 64), (128, 128)]:
        grad = torch.randn(*shape, generator=g)
        args = ((3.4445, -4.775, 2.0315), 5, 1e-7)
        ours = newton_schulz(grad, *args)
        ref = _muon._zeropower_via_newtonschulz(grad, *args).float()
        assert ours.dtype == torch.float32 and ours.shape == grad.shape
        # bf16 keeps ~3 significant digits and 5 iterations compound it: a few % in Frobenius norm
        assert torch.linalg.norm(ours - ref) < 0.05 * torch.linalg.norm(ref)
        # an orthogonalised update: singular values pulled towards 1 (the quintic aims at ~[0.5, 1.5];
        # the tiniest ones of a random square matrix need more than 5 steps, so look at the median)
        s = torch.linalg.svdvals(ours)
        assert 0.5 < s.median() < 1.5 and s.max() < 1.6


def test_torch_muon_steps_like_torch_and_shares_its_state_dict():
    gen = torch.Generator().manual_seed(0)
    init, grads = torch.randn(32, 16, generator=gen), [torch.randn(32, 16, generator=gen) for _ in range(3)]
    ours_w, torch_w = nn.Parameter(init.clone()), nn.Parameter(init.clone())
    ours = TorchMuon([ours_w], lr=0.02, weight_decay=0.1)
    theirs = torch.optim.Muon([torch_w], lr=0.02, weight_decay=0.1)
    for grad in grads:
        ours_w.grad, torch_w.grad = grad.clone(), grad.clone()
        ours.step()
        theirs.step()
    # the same steps up to torch's bf16 rounding: a few % of the distance travelled
    assert torch.linalg.norm(ours_w - torch_w) < 0.05 * torch.linalg.norm(torch_w - init)
    assert not torch.equal(ours_w.detach(), init)
    ours_state, torch_state = ours.state_dict(), theirs.state_dict()
    assert ours_state["param_groups"] == torch_state["param_groups"]
    assert set(ours_state["state"][0]) == set(torch_state["state"][0]) == {"momentum_buffer"}
    theirs.load_state_dict(ours_state)  # an old torch.optim.Muon checkpoint and ours are interchangeable


def test_importing_our_optimizers_leaves_torch_untouched():
    code = (
        "import torch.optim._muon as m; original = m._zeropower_via_newtonschulz; "
        "import looplab.workers.train.optim, looplab.workers.train.muon, looplab.workers.train.orthogonalise; "
        "assert m._zeropower_via_newtonschulz is original; "
        "assert original.__module__ == 'torch.optim._muon'; print('untouched')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0 and "untouched" in done.stdout, done.stderr
    from torch.optim import _muon

    assert _muon._zeropower_via_newtonschulz.__module__ == "torch.optim._muon"
