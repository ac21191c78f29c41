"""Global batch and micro-batches: a step split into forwards computes the gradient of the whole batch.

(a) The trainer's accumulated gradient (`Trainer._accumulate`) of a batch of 8 in 4 forwards of 2 equals
the gradient of the 8 in one forward, to float summation order, for every sampler (fixed with truncated
backprop, per-batch Poisson, per-sequence Poisson on the aligned and the staggered schedule), bucketing
on and off; whole short runs give the same loss curve. Gradients are compared, not weights after a step:
the optimizer's first step and Muon's orthogonalisation amplify rounding.
Plus: the data rows and h0 are addressed by global row, evaluation in micro-batches, resume across a
change of execution fields (bit for bit where the arithmetic is the same), a checkpoint written before
h0 was row-addressed resumes with the old h0, and bad values are refused by name.
"""

from __future__ import annotations

import json

import pytest
import torch

from looplab.model.errors import ConfigError
from looplab.model.init import RowKey
from looplab.workers import checkpoint as ckpt
from looplab.workers import jobs
from looplab.workers.artifacts import resume_from
from looplab.workers.data.shards import SAMPLER_PERMUTATION, SAMPLER_WITH_REPLACEMENT, get_batch
from looplab.workers.reporter import MemoryReporter
from looplab.workers.train import job as train
from looplab.workers.train.optim import set_lr
from looplab.workers.train.spec import SIZE_BATCH, Spec, execution_fields, identity
from looplab.workers.train.trainer import Trainer
from looplab.workers.validation import eval_forwards, evaluate
from tests.model.conftest import randomize
from tests.tier import fast_few
from tests.workers.conftest import TINY_MODEL, tiny_spec

SAMPLERS = {
    "fixed, truncated": ("fixed6_grad3", {}),
    "per-batch poisson": ("parcae_per_batch", {}),
    "per-sequence poisson (aligned)": ("parcae", {}),
    "per-sequence poisson (staggered)": ("lean", {"loop_sampler": "poisson_seq", "grad_rounds": 2}),
}


def _trainer(tmp_path, name: str, **kw) -> Trainer:
    return Trainer(Spec.from_dict(tiny_spec(**kw)), MemoryReporter(), tmp_path / name)


def _grads(trainer: Trainer, step: int) -> tuple[float, dict[str, torch.Tensor]]:
    model = trainer.model
    model.zero_grad(set_to_none=True)
    loss = trainer._accumulate(model, trainer.forward_model, step).item()
    return loss, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("bucketing", [True, False], ids=["bucketing", "no-bucketing"])
@pytest.mark.parametrize("sampler", list(SAMPLERS))
def test_accumulated_gradient_equals_the_whole_batch(looplab_cache, tmp_path, sampler, bucketing):
    recipe, overrides = SAMPLERS[sampler]
    model = {**TINY_MODEL, **overrides}
    whole = _trainer(tmp_path, "whole", recipe=recipe, model=model)
    split = _trainer(tmp_path, "split", recipe=recipe, model=model, micro_batch_size=2, bucketing=bucketing)
    randomize(whole.model)  # at init every output projection is zero: most gradients would vanish
    split.model.load_state_dict(whole.model.state_dict())
    mixed = 0
    for step in (0, 1, 2):
        counts = whole.model.sample_loops(8, step, whole.spec.seed)
        mixed += len(set(counts.tolist())) > 1
        loss, want = _grads(whole, step)
        got_loss, got = _grads(split, step)
        assert got_loss == pytest.approx(loss, rel=1e-6)
        assert sorted(got) == sorted(want) and len(want) > 10
        for name, g in want.items():
            err = (got[name] - g).norm() / g.norm().clamp_min(1e-30)
            assert err < 1e-5, (name, float(err))
        total = torch.cat([g.flatten() for g in want.values()])
        diff = torch.cat([(got[n] - want[n]).flatten() for n in want])
        assert diff.norm() <= 1e-6 * total.norm()
    assert mixed == (3 if "per-sequence" in sampler else 0)  # the per-sequence cases do pad


def test_the_tolerance_sees_a_split_that_changes_h0(looplab_cache, tmp_path):
    """The comparison above is sharp: forwards whose h0 is drawn per forward from the global RNG (as
    training did before RowKey) in another row order (as bucketing runs them) give a gradient far
    outside it. (In row order the CPU generator happens to fill 4 x 2 rows as it fills 8; CUDA's does
    not.)"""
    whole = _trainer(tmp_path, "whole", recipe="parcae")
    randomize(whole.model)
    x, y = get_batch(whole.data.train, 8, 32, 0, 0)
    counts = whole.model.sample_loops(8, 0, 0)

    def grad(forwards) -> torch.Tensor:
        whole.model.zero_grad(set_to_none=True)
        torch.manual_seed(5)
        for rows in forwards:
            out = whole.model(x[rows], targets=y[rows], loops=counts[rows])
            (out.loss * len(rows) / 8).backward()
        return torch.cat([p.grad.flatten() for p in whole.model.parameters() if p.grad is not None])

    a, b = grad([list(range(8))]), grad([[6, 7], [4, 5], [2, 3], [0, 1]])
    assert (a - b).norm() > 1e-3 * a.norm()


@pytest.mark.parametrize("recipe", fast_few(["fixed6_grad3", "parcae"]))
def test_whole_runs_give_the_loss_curve_of_the_whole_batch(looplab_cache, tmp_path, recipe):
    runs = {}
    for micro in (None, 2):
        runs[micro] = MemoryReporter()
        spec = Spec.from_dict(tiny_spec(recipe=recipe, micro_batch_size=micro, tokens=8 * 32 * 12))
        train.run(spec, runs[micro], tmp_path / str(micro))
    for key, steps in (("train_loss", list(range(12))), ("val_loss", [11])):
        whole, split = dict(runs[None].curve(key)), dict(runs[2].curve(key))
        assert sorted(whole) == sorted(split) == steps
        assert all(abs(split[s] - whole[s]) < 1e-4 for s in steps), (key, whole, split)


@pytest.mark.parametrize("sampler", [SAMPLER_WITH_REPLACEMENT, SAMPLER_PERMUTATION])
def test_a_micro_batch_of_rows_is_those_rows_of_the_global_batch(looplab_cache, tmp_path, sampler):
    data = _trainer(tmp_path, "run").data.train
    x, y = get_batch(data, 8, 32, 3, 11, sampler)  # (8, 32)
    for rows in ([2, 3], [7, 0, 5], list(range(8))):
        xr, yr = get_batch(data, 8, 32, 3, 11, sampler, rows=rows)
        assert torch.equal(xr, x[rows]) and torch.equal(yr, y[rows])
    assert not torch.equal(get_batch(data, 8, 32, 3, 12, sampler)[0], x)  # another step, other windows


def test_training_h0_is_addressed_by_global_row(looplab_cache, tmp_path):
    """A row's initial state is the same whichever forward holds it: the RowKey of rows (5, 2) gives
    rows 5 and 2 of the whole batch's."""
    trainer = _trainer(tmp_path, "run", recipe="parcae")
    model, d = trainer.model, trainer.cfg.d_model
    pos, like = torch.arange(32), torch.empty(())
    full = model._h0(8, pos, RowKey(0, 4, tuple(range(8))), like)  # (8, 32, d)
    part = model._h0(2, pos, RowKey(0, 4, (5, 2)), like)
    assert full.shape == (8, 32, d) and torch.equal(part, full[[5, 2]])
    assert not torch.equal(model._h0(8, pos, RowKey(0, 5, tuple(range(8))), like), full)  # by step
    assert not torch.equal(model._h0(8, pos, RowKey(1, 4, tuple(range(8))), like), full)  # by seed


def test_evaluation_in_micro_batches_gives_the_same_loss(looplab_cache, tmp_path):
    trainer = _trainer(tmp_path, "run", recipe="parcae", eval_tokens=32 * 10)
    randomize(trainer.model)
    args = (trainer.model, trainer.val, 4, trainer.device, trainer.token_bytes)
    whole = evaluate(*args, loops=3, h0_seed=7)
    batches = []
    split = evaluate(*args, loops=3, h0_seed=7, micro_batch_size=3, on_batch=batches.append)
    # batches of 4, 4, 2 in forwards of 3+1, 3+1, 2: progress counts each batch once, when it is done
    assert len(trainer.val) == 10 and batches == [1, 2, 3]
    assert [(i, r.start, r.stop, end) for i, r, end in eval_forwards(10, 4, 3)] == [
        (0, 0, 3, False),
        (0, 3, 4, True),
        (1, 4, 7, False),
        (1, 7, 8, True),
        (2, 8, 10, True),
    ]
    assert split.loss == pytest.approx(whole.loss, rel=1e-6) and split.bpb == pytest.approx(
        whole.bpb, rel=1e-6
    )
    other = evaluate(*args[:2], 2, *args[3:], loops=3, h0_seed=7)  # batch 2 seeds its h0 otherwise
    assert abs(other.loss - whole.loss) > 1e-6


# ---- the spec: batch by size, micro-batch, bucketing, identity --------------------------------------


def test_batch_size_defaults_by_size_and_an_explicit_one_stays():
    assert Spec.from_dict({"size": "144m", "tokens": 1}).batch_size == 256 == SIZE_BATCH["86m"]
    assert Spec.from_dict({"size": "small", "tokens": 1}).batch_size == 8 == Spec().batch_size
    d = Spec.from_dict({"size": "144m", "batch_size": 8, "tokens": 1}).to_dict()
    assert d["batch_size"] == 8 and Spec.from_dict(d).to_dict() == d  # a stored config is unchanged
    resolved = Spec.from_dict({"size": "86m", "tokens": 1}).to_dict()
    assert resolved["batch_size"] == 256 and jobs.validate("train", resolved) == resolved
    assert resolved["micro_batch_size"] == "auto" and resolved["bucketing"] is True  # the most that fits
    assert Spec.from_dict({"size": "small", "tokens": 1}).micro_batch_size is None  # the whole batch
    given = Spec.from_dict({"size": "86m", "tokens": 1, "micro_batch_size": None})
    assert given.micro_batch_size is None and given.batch_size == 256  # a given value stays


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"micro_batch_size": 0}, "micro_batch_size: must be >= 1"),
        ({"micro_batch_size": 9}, "micro_batch_size: must be <= 8"),
        ({"micro_batch_size": "lots"}, "micro_batch_size: expected an integer.*or 'auto'"),
        ({"micro_batch_size": 2.5}, "micro_batch_size: expected an integer"),
        ({"bucketing": "yes"}, "bucketing"),
        ({"batch_size": 0}, "batch_size: must be >= 1"),
    ],
)
def test_bad_batch_values_are_refused_by_name(bad, message):
    with pytest.raises(ConfigError, match=message):
        Spec.from_dict(tiny_spec(**bad))


def test_identity_drops_exactly_the_execution_fields():
    assert execution_fields() == {
        "micro_batch_size",
        "bucketing",
        "compile",
        "device",
        "log_every",
        "eval_every",
        "eval_loops",
        "ckpt_every",
        "ckpt_minutes",
        "keep_checkpoints",
        "calib_steps",
    }
    d = Spec.from_dict(tiny_spec()).to_dict()
    ident = identity(d)
    assert set(d) - set(ident) == execution_fields() and ident["batch_size"] == 8 and "seed" in ident
    other = Spec.from_dict(tiny_spec(micro_batch_size=2, compile=True, ckpt_every=3, device="auto")).to_dict()
    assert identity(other) == ident
    old = {k: v for k, v in d.items() if k not in ("micro_batch_size", "bucketing")}  # stored before them
    assert identity(old) == ident


def test_artifact_dir_takes_a_new_execution_and_refuses_a_new_run(tmp_path):
    spec = Spec.from_dict(tiny_spec())
    train.check_artifact_dir(spec, tmp_path)
    old = {k: v for k, v in spec.to_dict().items() if k not in ("micro_batch_size", "bucketing")}
    (tmp_path / "spec.json").write_text(json.dumps(old))  # written before the new fields existed
    faster = Spec.from_dict(tiny_spec(micro_batch_size=4, eval_every=7))
    train.check_artifact_dir(faster, tmp_path)
    assert json.loads((tmp_path / "spec.json").read_text()) == faster.to_dict()  # the latest execution
    for key, value in (("batch_size", 16), ("lr", 0.01), ("seq_len", 16)):
        with pytest.raises(ConfigError, match=f"^{key}: artifact dir"):
            train.check_artifact_dir(Spec.from_dict(tiny_spec(**{key: value})), tmp_path)


# ---- resume --------------------------------------------------------------------------------------


class StopAt(MemoryReporter):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def should_stop(self):
        return len(self.curve("train_loss")) >= self.step


def _stopped_then_resumed(tmp_path, first: dict, then: dict) -> MemoryReporter:
    with pytest.raises(jobs.JobInterrupted):
        train.run(Spec.from_dict(tiny_spec(**first)), StopAt(7), tmp_path / "run")
    resumed = MemoryReporter()
    train.run(Spec.from_dict(tiny_spec(**then)), resumed, tmp_path / "run")
    assert resumed.of("resumed") == [{"step": 7}]
    return resumed


def test_resume_under_other_execution_fields_is_bit_for_bit_where_the_arithmetic_is_the_same(
    looplab_cache, tmp_path
):
    """Stopped at step 7 with micro-batches of 2 and bucketing, resumed with bucketing off and other
    cadences: fixed loop counts give the same forwards, so the rest of the curve and the final weights
    are exactly those of the uninterrupted run."""
    base = dict(recipe="fixed6_grad3", tokens=8 * 32 * 12, ckpt_every=5, micro_batch_size=2)
    ref = MemoryReporter()
    train.run(Spec.from_dict(tiny_spec(**base)), ref, tmp_path / "ref")
    then = {**base, "bucketing": False, "ckpt_every": 3, "eval_every": 4, "eval_loops": [2]}
    resumed = _stopped_then_resumed(tmp_path, base, then)
    want, got = dict(ref.curve("train_loss")), dict(resumed.curve("train_loss"))
    assert sorted(got) == list(range(7, 12)) and all(got[s] == want[s] for s in got)
    a, b = (ckpt.load(tmp_path / d / ckpt.FINAL)["model"] for d in ("ref", "run"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert ckpt.load(tmp_path / "run" / ckpt.FINAL)["spec"]["eval_loops"] == [2]  # the latest spec


def test_resume_with_another_micro_batch_size_continues_the_same_run(looplab_cache, tmp_path):
    """Micro-batches of 4 after 7 steps of 2: a different summation order, so equal to rounding."""
    base = dict(recipe="parcae", tokens=8 * 32 * 12, ckpt_every=5)
    ref = MemoryReporter()
    train.run(Spec.from_dict(tiny_spec(**base, micro_batch_size=2)), ref, tmp_path / "ref")
    resumed = _stopped_then_resumed(
        tmp_path, {**base, "micro_batch_size": 2}, {**base, "micro_batch_size": 4}
    )
    want, got = dict(ref.curve("train_loss")), dict(resumed.curve("train_loss"))
    assert sorted(got) == list(range(7, 12)) and all(abs(got[s] - want[s]) < 1e-4 for s in got)
    assert any(e["message"].count("micro-batch 4") for e in resumed.of("log"))


def test_resume_refuses_a_checkpoint_of_another_run_naming_the_field(looplab_cache, tmp_path):
    with pytest.raises(jobs.JobInterrupted):
        train.run(Spec.from_dict(tiny_spec(tokens=8 * 32 * 12)), StopAt(2), tmp_path)
    (tmp_path / "spec.json").unlink()  # the checkpoint's own check, not the artifact dir's
    with pytest.raises(ConfigError, match="different run: batch_size=8, this spec has 4"):
        train.run(Spec.from_dict(tiny_spec(tokens=8 * 32 * 12, batch_size=4)), MemoryReporter(), tmp_path)


def _pre_row_key_step(trainer: Trainer, step: int) -> float:
    """`Trainer._train_step` as it was before h0 was row-addressed (commit d76bb68): one forward of the
    whole batch, h0 drawn inside it from the global RNG."""
    spec, model = trainer.spec, trainer.model
    set_lr(trainer.opts, trainer._factor(step), progress=step / trainer.state.total_steps)
    x, y = get_batch(trainer.data.train, spec.batch_size, trainer.seq_len, spec.seed, step)
    loops = model.sample_loops(spec.batch_size, step, spec.seed)
    out = model(x, targets=y, loops=loops)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
    for opt in trainer.opts:
        opt.step()
    for opt in trainer.opts:
        opt.zero_grad(set_to_none=True)
    return out.loss.item()


def _aged(run_dir) -> dict:
    """Make the run's checkpoint and spec.json look as the code before the new fields wrote them."""
    path = resume_from(run_dir)
    saved = ckpt.load(path)
    for key in ("micro_batch_size", "bucketing", "keep_checkpoints"):
        del saved["spec"][key]
    del saved["trainer"]["h0_version"]
    ckpt.save(path, saved)
    (run_dir / "spec.json").write_text(json.dumps(saved["spec"], indent=1, sort_keys=True))
    return saved


@pytest.mark.parametrize("micro", [None, 2])
def test_a_checkpoint_from_before_row_keys_resumes_with_the_old_h0(looplab_cache, tmp_path, micro):
    """A checkpoint without h0_version (and a spec without the new fields) resumes, and its run goes on
    drawing h0 from the global RNG: the losses are those of the old step from the same checkpoint,
    bit for bit in one forward, to rounding in micro-batches (each sliced from the step's one draw)."""
    d = tiny_spec(recipe="parcae", tokens=8 * 32 * 12, ckpt_every=5)
    with pytest.raises(jobs.JobInterrupted):
        train.run(Spec.from_dict(d), StopAt(7), tmp_path / "run")
    saved = _aged(tmp_path / "run")
    old = Trainer(Spec.from_dict(d), MemoryReporter(), tmp_path / "old")
    old.state.total_steps = 12
    old._restore(saved)
    assert old.state.h0_version == 0
    want = {s: _pre_row_key_step(old, s) for s in range(7, 12)}
    resumed = MemoryReporter()
    train.run(Spec.from_dict({**d, "micro_batch_size": micro}), resumed, tmp_path / "run")
    got = dict(resumed.curve("train_loss"))
    assert sorted(got) == sorted(want)
    if micro is None:
        assert got == want
    else:
        assert all(abs(got[s] - want[s]) < 1e-5 for s in got)
    assert ckpt.load(tmp_path / "run" / ckpt.FINAL)["trainer"]["h0_version"] == 0  # stays the old kind
    # and the new h0 would have given another curve: the test tells the versions apart
    new = Trainer(Spec.from_dict(d), MemoryReporter(), tmp_path / "new")
    new.state.total_steps = 12
    new._restore(saved)
    new.state.h0_version = 1
    loss, _ = new._train_step(new.model, new.model, new.opts, 7, new._factor(7), 7 / 12)
    assert abs(loss - want[7]) > 1e-5


def test_new_runs_record_the_row_key_h0(looplab_cache, tmp_path):
    train.run(Spec.from_dict(tiny_spec(tokens=8 * 32 * 2)), MemoryReporter(), tmp_path)
    assert ckpt.load(tmp_path / ckpt.FINAL)["trainer"]["h0_version"] == 1


# ---- the command line ----------------------------------------------------------------------------


def test_cli_global_batch_and_micro_batch(looplab_cache, tmp_path, capsys):
    from looplab.workers.train.cli import main

    def logs(name: str) -> str:
        lines = (tmp_path / f"{name}.jsonl").read_text().splitlines()
        return "\n".join(e["message"] for e in map(json.loads, lines) if e["kind"] == "log")

    args = ["--preset", "parcae", "--size", "tiny", "--model", "d_model=32", "--model", "n_heads=1"]
    args += ["--model", "head_dim=32", "--seq-len", "32", "--batch-size", "8", "--tokens", str(8 * 32 * 2)]
    args += ["--eval-tokens", "256", "--device", "cpu", "--quiet"]
    for name, more in (
        ("run", ["--micro-batch-size", "2"]),
        ("off", ["--micro-batch-size", "3", "--no-bucketing"]),
    ):
        out = ["--out", str(tmp_path / name), "--events-jsonl", str(tmp_path / f"{name}.jsonl")]
        assert main([*args, *more, *out]) == 0
    assert "global batch 8, micro-batch 2 (4 forwards per step), bucketing on" in logs("run")
    assert "global batch 8, micro-batch 3 (3 forwards per step), bucketing off" in logs("off")
    assert json.loads((tmp_path / "run" / "spec.json").read_text())["micro_batch_size"] == 2
    capsys.readouterr()
    assert main([*args, "--micro-batch-size", "lots", "--out", str(tmp_path / "x")]) == 2
    assert "error: micro_batch_size: expected an integer" in capsys.readouterr().err
    out = ["--out", str(tmp_path / "auto"), "--events-jsonl", str(tmp_path / "auto.jsonl")]
    assert main([*args, "--micro-batch-size", "auto", *out]) == 0  # 8 tiny sequences fit any machine
    assert "global batch 8, micro-batch 8 (1 forward per step; auto: the most that fit" in logs("auto")
    assert json.loads((tmp_path / "auto" / "spec.json").read_text())["micro_batch_size"] == "auto"
