"""Loss spikes rewound (workers/train/rewind.py): a spike placed by the test-only hook sends the run back to a
checkpoint from before it, its data step is skipped and listed, the run finishes, and a rerun, a stop and
resume, and a kill -9 and resume all give the same curve; the rewinds are bounded; bad settings are
refused by name."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from looplab.model.errors import ConfigError
from looplab.workers import checkpoint as ckpt
from looplab.workers import jobs
from looplab.workers.artifacts import resume_from
from looplab.workers.reporter import MemoryReporter
from looplab.workers.train import job as train
from looplab.workers.train import rewind, trainer
from tests.workers.conftest import tiny_spec
from tests.workers.test_resume import _cmd, _env, kill_once

STEPS = 12
RULE = {"k": 3.0, "window": 4, "max_rewinds": 2}
SPEC = dict(tokens=8 * 32 * STEPS, ckpt_every=2, spike_rewind=RULE)


def live(rep: MemoryReporter, key: str = "train_loss") -> dict[int, float]:
    """The curve as the database keeps it: a later point of a step replaces an earlier one."""
    return {s: v for s, v in rep.curve(key)}


@pytest.fixture
def spike_at_6(monkeypatch):
    monkeypatch.setattr(trainer, "TEST_SPIKE", (6.0, 50.0))


def test_a_spike_is_rewound_once_its_data_skipped_and_a_rerun_is_exact(looplab_cache, tmp_path, spike_at_6):
    spec = train.Spec.from_dict(tiny_spec(**SPEC))
    rep = MemoryReporter()
    row = train.run(spec, rep, tmp_path / "a")
    assert rep.of("rewound") == [{"step": 4, "spiked_step": 6, "rows": list(range(48, 56)), "n": 1}]
    first_pass = [v for s, v in rep.curve("train_loss")][:7]
    median = sorted(first_pass[2:6])[1:3]
    assert first_pass[6] > 3 * sum(median) / 2  # the hook made a spike the rule saw
    curve = live(rep)
    assert sorted(curve) == list(range(STEPS)) and row["steps"] == STEPS
    assert curve[6] != first_pass[6] and max(curve.values()) < first_pass[6]  # step 6 read other data
    assert [s for s, _ in rep.curve("train_loss")] == [*range(7), *range(4, STEPS)]
    assert any("rewind 1: back to checkpoint-a0001-s00000004.pt" in e["message"] for e in rep.of("log"))
    # the steps before the spike replayed identically; the checkpoint carries what was skipped
    assert all(curve[s] == first_pass[s] for s in range(6))
    saved = ckpt.load(resume_from(tmp_path / "a"))["trainer"]
    assert (saved["skipped_steps"], saved["rewinds"]) == ([6], 1)

    again = MemoryReporter()
    train.run(spec, again, tmp_path / "b")
    assert again.curve("train_loss") == rep.curve("train_loss") and again.of("rewound") == rep.of("rewound")

    class StopAt(MemoryReporter):
        def should_stop(self):  # after the rewind, before the end
            return len(self.curve("train_loss")) >= 10

    stopped, resumed = StopAt(), MemoryReporter()
    with pytest.raises(jobs.JobInterrupted):
        train.run(spec, stopped, tmp_path / "c")
    train.run(spec, resumed, tmp_path / "c")
    assert stopped.of("rewound") == rep.of("rewound") and resumed.of("rewound") == []  # saved with it
    assert {**live(stopped), **live(resumed)} == curve
    a, b = ckpt.load(tmp_path / "a" / "final.pt")["model"], ckpt.load(tmp_path / "c" / "final.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_without_the_rule_the_spike_stays_and_the_spec_is_the_old_one(looplab_cache, tmp_path, spike_at_6):
    plain = train.Spec.from_dict(tiny_spec(tokens=8 * 32 * STEPS, ckpt_every=2))
    assert "spike_rewind" not in plain.to_dict()  # stored runs keep their dict and hash
    rep = MemoryReporter()
    train.run(plain, rep, tmp_path)
    assert rep.of("rewound") == [] and [s for s, _ in rep.curve("train_loss")] == list(range(STEPS))


def test_rewinds_are_bounded_and_need_a_checkpoint_before_the_spike(looplab_cache, tmp_path, monkeypatch):
    monkeypatch.setattr(trainer, "TEST_SPIKE", (6.0, 50.0))
    once = train.Spec.from_dict(tiny_spec(**{**SPEC, "spike_rewind": {**RULE, "max_rewinds": 1}}))
    monkeypatch.setattr(rewind, "data_step", lambda step, skipped: step)  # the spike's data is never skipped
    monkeypatch.setattr(trainer, "data_step", lambda step, skipped: step)
    with pytest.raises(rewind.SpikeError, match=r"loss spike at step 6: .* 1 rewind\(s\) used"):
        train.run(once, MemoryReporter(), tmp_path / "bounded")
    monkeypatch.undo()
    monkeypatch.setattr(trainer, "TEST_SPIKE", (5.0, 50.0))
    late = train.Spec.from_dict(tiny_spec(**{**SPEC, "ckpt_every": 100}))
    with pytest.raises(rewind.SpikeError, match="no checkpoint from before it"):
        train.run(late, MemoryReporter(), tmp_path / "early")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"k": 1}, "spike_rewind.k: must be > 1"),
        ({"window": 1}, "spike_rewind.window: must be >= 2, got 1"),
        ({"max_rewinds": 0}, "spike_rewind.max_rewinds: must be >= 1, got 0"),
        ({"kk": 3}, "spike_rewind: unknown key 'kk'; accepted: k, window, max_rewinds"),
        (3, "spike_rewind: expected a mapping of k, window and max_rewinds, or null"),
    ],
)
def test_bad_rewind_settings_are_refused_by_name(value, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train.Spec.from_dict(tiny_spec(spike_rewind=value))


def test_data_steps_skip_what_was_skipped():
    assert [rewind.data_step(t, [2, 5]) for t in range(6)] == [0, 1, 3, 4, 6, 7]
    assert rewind.data_step(3, []) == 3 and rewind.rows_of(2, 4) == [8, 9, 10, 11]


def _events(path) -> list[dict]:
    """The events of a JSON-lines file, read while it is written (a torn last line is left out)."""
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


@pytest.mark.slow  # docs/testing.md: two training processes, one killed
def test_a_rewound_run_killed_and_resumed_replays_the_uninterrupted_curve(looplab_cache, tmp_path):
    args = ["--ckpt-every", "4", "--spike-rewind", "k=3", "--spike-rewind", "window=4"]
    env = {**_env(), "LOOPLAB_TEST_SPIKE": "13:50"}
    ref_ev = tmp_path / "ref.jsonl"
    subprocess.run([*_cmd(tmp_path / "ref", ref_ev), *args], env=env, check=True, timeout=300)
    out, ev1, ev2 = tmp_path / "killed", tmp_path / "a1.jsonl", tmp_path / "a2.jsonl"
    proc = subprocess.Popen([*_cmd(out, ev1), *args], env=env, stderr=subprocess.DEVNULL)
    kill_once(proc, lambda: any(e["kind"] == "rewound" for e in _events(ev1)), "its rewind")
    subprocess.run([*_cmd(out, ev2), *args], env=env, check=True, timeout=300)

    def curve(*files) -> dict[int, float]:
        return {e["step"]: e["value"] for f in files for e in _events(f) if e.get("key") == "train_loss"}

    ref = [e for e in _events(ref_ev) if e["kind"] == "rewound"]
    assert [(e["step"], e["spiked_step"], e["n"]) for e in ref] == [(12, 13, 1)]
    assert curve(ev1, ev2) == curve(ref_ev)  # exact, every step
    a, b = ckpt.load(tmp_path / "ref" / "final.pt")["model"], ckpt.load(out / "final.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
