"""Depth sweep of a tiny trained fixed4 model: more loops help, rounds change the state, CLI works."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from looplab.model.errors import ConfigError
from looplab.workers import inputs, jobs
from looplab.workers.evaluate import depth_sweep
from looplab.workers.reporter import MemoryReporter
from looplab.workers.train import job as train
from looplab.workers.validation import far_copy_mask, previous_gap
from tests.workers.conftest import tiny_spec


def test_spec_validation_and_defaults():
    d = jobs.validate("depth_sweep", {})
    assert d["loops"] == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32] and d["checkpoint"] is None
    assert depth_sweep.Spec.from_dict(d).to_dict() == d
    # a field added later is left out at its default: a sweep stored before it keeps its hash
    assert "far_distance" not in d and depth_sweep.Spec.from_dict(d).far_distance == 500
    assert depth_sweep.Spec.from_dict({"far_distance": 256}).to_dict()["far_distance"] == 256
    assert "test_split" not in d and depth_sweep.Spec.from_dict(d).test_split is False
    assert depth_sweep.Spec.from_dict({"test_split": True}).to_dict()["test_split"] is True
    assert d["interaction_loops"] == [4, 8] and d["interaction_tokens"] == 4096
    assert depth_sweep.Spec.from_dict({"interaction_loops": []}).interaction_loops == []
    for bad, field in [
        ({"loops": []}, "loops"),
        ({"loops": [0]}, "loops"),
        ({"eval_tokens": -1}, "eval_tokens"),
        ({"x": 1}, "x"),
        ({"split_far_copy": "yes"}, "split_far_copy"),
        ({"h0_seed": -1}, "h0_seed"),
        ({"checkpoint": ""}, "checkpoint"),
        ({"interaction_loops": [1]}, "interaction_loops"),
        ({"interaction_loops": [4, 33]}, "interaction_loops: at most 32"),
        ({"interaction_loops": "4"}, "interaction_loops"),
        ({"interaction_tokens": 0}, "interaction_tokens"),
        ({"far_distance": 0}, "far_distance"),
        ({"test_split": "yes"}, "test_split"),
    ]:
        with pytest.raises(ConfigError, match=field):
            depth_sweep.Spec.from_dict(bad)


def test_four_loops_beat_one_and_rounds_change_the_state(trained_fixed4, tmp_path):
    out, _ = trained_fixed4
    rep = MemoryReporter()
    spec = depth_sweep.Spec.from_dict(
        {"checkpoint": str(out), "loops": [1, 4], "eval_tokens": 1024, "device": "cpu"}
    )
    res = depth_sweep.run(spec, rep, tmp_path)
    evals = {r["row"]["loops"]: r["row"] for r in rep.of("result") if r["table"] == "depth_evals"}
    assert evals[4]["val_loss"] < evals[1]["val_loss"]
    deltas = [r["row"] for r in rep.of("result") if r["table"] == "round_deltas"]
    assert [(d["loops"], d["round"]) for d in deltas] == [(1, 1), (4, 1), (4, 2), (4, 3), (4, 4)]
    assert all(math.isfinite(d["rel_change"]) and d["rel_change"] > 0 for d in deltas)
    assert res["far_distance"] == 500
    for e in evals.values():  # 32-token sequences: no previous occurrence lies 500 tokens back
        assert e["far_share"] == 0 and e["far_copy_loss"] is None and e["far_definition"] == 2
    progress = rep.of("progress")
    assert progress[-1]["done"] == progress[-1]["total"]
    # an eta on every tick (the live line's `eta` column), down to none left at the end
    assert all(p["eta_s"] is not None and p["eta_s"] >= 0 for p in progress)
    assert progress[-1]["eta_s"] == 0 and progress[0]["eta_s"] > 0


def test_far_split_at_a_distance_inside_the_sequence(trained_fixed4, tmp_path):
    """At distance 4 in 32-token sequences some tokens are far: the share is stored with the losses,
    and the mean loss lies between the far and the near loss, weighted by that share."""
    out, _ = trained_fixed4
    rep = MemoryReporter()
    spec = depth_sweep.Spec.from_dict(
        {"checkpoint": str(out), "loops": [1, 4], "eval_tokens": 1024, "device": "cpu", "far_distance": 4}
    )
    assert depth_sweep.run(spec, rep, tmp_path)["far_distance"] == 4
    evals = {r["row"]["loops"]: r["row"] for r in rep.of("result") if r["table"] == "depth_evals"}
    for e in evals.values():
        assert 0 < e["far_share"] < 1 and e["far_distance"] == 4 and e["far_definition"] == 2
        assert e["far_copy_loss"] is not None and e["near_loss"] is not None
        assert (
            min(e["far_copy_loss"], e["near_loss"])
            <= e["val_loss"]
            <= max(e["far_copy_loss"], e["near_loss"])
        )
        mixed = e["far_share"] * e["far_copy_loss"] + (1 - e["far_share"]) * e["near_loss"]
        assert mixed == pytest.approx(e["val_loss"], rel=1e-5)


def test_far_copy_mask_definition():
    """Far: the previous occurrence lies more than the distance back and none lies within it. Token 5
    recurs at distance 5 from its first occurrence; token 7 occurs far back and again close by."""
    seq = torch.tensor([[5, 7, 1, 2, 7, 3, 5, 7]])
    x, y = seq[:, :-1], seq[:, 1:]  # targets at positions 1..7
    assert previous_gap(seq).tolist() == [[0, 0, 0, 0, 3, 0, 6, 3]]
    assert far_copy_mask(x, y, distance=3).tolist() == [[False, False, False, False, False, True, False]]
    assert far_copy_mask(x, y, distance=2).tolist() == [[False, False, False, True, False, True, True]]
    assert far_copy_mask(x, y, distance=6).sum() == 0


def test_previous_gap_matches_the_pairwise_definition():
    """The sort-based gaps equal the closest earlier equal token found by comparing every pair."""
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(0, 9, (3, 64), generator=g)
    eq = seq[:, :, None] == seq[:, None, :]
    pos = torch.arange(64)
    earlier = eq & (pos[None, :] < pos[:, None])[None]
    last = torch.where(earlier, pos[None, None, :], -1).max(dim=-1).values
    expected = torch.where(last >= 0, pos[None, :] - last, 0)
    assert torch.equal(previous_gap(seq), expected)


def test_cli_prints_table_and_bad_input_exits_2(trained_fixed4, tmp_path, capsys):
    out, _ = trained_fixed4
    args = ["--checkpoint", str(out), "--loops", "1,2", "--eval-tokens", "256", "--device", "cpu", "--quiet"]
    assert depth_sweep.main(args) == 0
    printed = capsys.readouterr().out
    assert "best:" in printed and "val_loss" in printed
    assert depth_sweep.main(["--checkpoint", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "checkpoint" in err and "nope" in err and len(err.strip().splitlines()) == 1
    for args, line in [
        ([], "error: checkpoint: required (give --checkpoint)"),
        (["--checkpoint", str(out), "--loops", "1,x"], "error: loops: expected an integer"),
    ]:
        with pytest.raises(SystemExit) as e:
            raise SystemExit(depth_sweep.main(args))
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and err.startswith(line) and len(err.splitlines()) == 1, err


def test_bpe_run_without_its_cache_uses_its_own_tokenizer_json(tmp_path, looplab_cache):
    (tmp_path / "tokenizer.json").write_text("{}")
    train_spec = {"data": {"corpus": "offline", "tokenizer": "bpe", "vocab_size": 333}}
    assert depth_sweep.data_spec(train_spec, tmp_path).tokenizer == str(tmp_path / "tokenizer.json")
    train_spec["data"]["tokenizer"] = "byte"
    assert depth_sweep.data_spec(train_spec, tmp_path).tokenizer == "byte"


def test_sweep_at_the_trained_loop_count_reproduces_the_final_val_loss(trained_fixed4, tmp_path):
    """Same validation tokens, same h0 seed: the depth table and the runs table agree at 4 loops."""
    out, train_rep = trained_fixed4
    final = next(r["row"] for r in train_rep.of("result") if r["table"] == "train_results")
    rep = MemoryReporter()
    spec = depth_sweep.Spec.from_dict(
        {"checkpoint": str(out), "loops": [4], "eval_tokens": 1024, "device": "cpu", "split_far_copy": False}
    )
    depth_sweep.run(spec, rep, tmp_path)
    (row,) = [r["row"] for r in rep.of("result") if r["table"] == "depth_evals"]
    assert row["val_loss"] == final["final_val_loss"]


def test_standalone_sweep_reproduces_a_parcae_runs_val_loss_exactly(looplab_cache, tmp_path):
    """`python -m looplab.workers.evaluate.depth_sweep` with its default h0 seed, at parcae's trained loop count (8),
    gives exactly the train run's final_val_loss (h0 matters for parcae: its state keeps h0)."""
    import json

    out, events = tmp_path / "run", tmp_path / "sweep.jsonl"
    spec = train.Spec.from_dict(tiny_spec(recipe="parcae", tokens=8 * 32 * 3, eval_loops=[8]))
    final = train.run(spec, MemoryReporter(), out)["final_val_loss"]
    cmd = [
        sys.executable,
        "-m",
        "looplab.workers.evaluate.depth_sweep",
        "--checkpoint",
        str(out),
        "--loops",
        "2,8",
        "--eval-tokens",
        "1024",
        "--batch-size",
        "8",
        "--device",
        "cpu",
        "--no-far-copy",
        "--events-jsonl",
        str(events),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in events.read_text().splitlines()]
    loss = {
        e["row"]["loops"]: e["row"]["val_loss"]
        for e in rows
        if e["kind"] == "result" and e["table"] == "depth_evals"
    }
    assert loss[8] == final and loss[2] != final


def test_sweep_records_the_loop_geometry_and_the_interaction_matrix(trained_fixed4, tmp_path):
    """Every round of every depth gets rel_change, angle and state variance (of the states the forward
    passes through); each interaction depth n gets its n(n-1)/2 pairs i < j, all finite and positive."""
    from looplab.model.geometry import rel_update
    from looplab.workers.data.shards import prepare, val_chunks
    from tests.model.conftest import forward_states

    out, _ = trained_fixed4
    rep = MemoryReporter()
    spec = depth_sweep.Spec.from_dict(
        {
            "checkpoint": str(out),
            "loops": [2, 4],
            "eval_tokens": 512,
            "device": "cpu",
            "split_far_copy": False,
            "interaction_loops": [3, 4],
            "interaction_tokens": 64,
        }
    )
    res = depth_sweep.run(spec, rep, tmp_path)
    deltas = [r["row"] for r in rep.of("result") if r["table"] == "round_deltas"]
    assert [(d["loops"], d["round"]) for d in deltas] == [(2, 1), (2, 2), (4, 1), (4, 2), (4, 3), (4, 4)]
    for d in deltas:
        assert 0 < d["angle"] <= math.pi and d["state_var"] > 0 and d["rel_change"] > 0
        assert 0 < d["bf16_resolution"] < 2**-7  # bf16 keeps 8 significant bits
        assert (d["change_ratio"] is None) == (d["round"] == 1)
        assert d["round"] == 1 or d["change_ratio"] > 0
    evals = {r["row"]["loops"]: r["row"] for r in rep.of("result") if r["table"] == "depth_evals"}
    for n, e in evals.items():  # the first round below the resolution, if any, is one of the forward's
        assert e["bf16_round"] is None or 1 <= e["bf16_round"] <= n
        below = [d["round"] for d in deltas if d["loops"] == n and d["rel_change"] < d["bf16_resolution"]]
        assert e["bf16_round"] == (below[0] if below else None)
    # rel_change equals the relative update of the states the forward passes through, on the same
    # batches and h0 seeds, as a mean over tokens
    model, cfg, train_spec = inputs.load_model(out, torch.device("cpu"))
    data = prepare(depth_sweep.data_spec(train_spec, out))
    chunks = val_chunks(data.val, 512, cfg.seq_len)
    total, tokens = torch.zeros(4), 0
    for i, start in enumerate(range(0, len(chunks), spec.batch_size)):
        x = chunks[start : start + spec.batch_size, :-1]
        with torch.no_grad():
            total += (
                rel_update(forward_states(model.eval(), x, loops=4, h0_seed=spec.h0_seed + i)) * x.numel()
            )
        tokens += x.numel()
    assert [d["rel_change"] for d in deltas if d["loops"] == 4] == pytest.approx(
        (total / tokens).tolist(), rel=1e-5
    )
    pairs = [(r["loops"], r["skipped"], r["round"]) for r in res["round_interactions"]]
    assert pairs == [
        (3, 1, 2),
        (3, 1, 3),
        (3, 2, 3),
        (4, 1, 2),
        (4, 1, 3),
        (4, 1, 4),
        (4, 2, 3),
        (4, 2, 4),
        (4, 3, 4),
    ]
    assert all(math.isfinite(r["interaction"]) and r["interaction"] > 0 for r in res["round_interactions"])
    assert [r["row"] for r in rep.of("result") if r["table"] == "round_interactions"] == res[
        "round_interactions"
    ]
    assert rep.of("progress")[-1]["done"] == rep.of("progress")[-1]["total"]


def test_the_test_split_is_evaluated_when_asked_and_only_then(trained_fixed4, tmp_path, monkeypatch):
    """With `test_split` each row carries the test loss and bpb, on other tokens than validation's with
    the same batches; without it they are None and the validation losses are the same. The offline
    corpus' validation documents (~100k byte tokens) fit in a 2M-token validation split, so the test
    cuts the validation split at 4,096 tokens (a preparation of its own) to leave room for a test split."""
    from looplab.orchestrator.writer import _result_problem
    from looplab.workers.data import shards as data

    monkeypatch.setattr(data, "VAL_TOKENS", 4096)
    out, _ = trained_fixed4
    base = {"checkpoint": str(out), "loops": [1, 4], "eval_tokens": 1024, "device": "cpu"}
    base |= {"split_far_copy": False, "interaction_loops": []}
    rows = {}
    for asked in (False, True):
        rep = MemoryReporter()
        res = depth_sweep.run(depth_sweep.Spec.from_dict({**base, "test_split": asked}), rep, tmp_path)
        assert res["test_split"] is asked
        rows[asked] = {r["row"]["loops"]: r["row"] for r in rep.of("result") if r["table"] == "depth_evals"}
        assert all(
            _result_problem("depth_evals", {**row, "job_id": 1}) is None for row in rows[asked].values()
        )
        assert rep.of("progress")[-1]["done"] == rep.of("progress")[-1]["total"]
    for n in (1, 4):
        off, on = rows[False][n], rows[True][n]
        assert off["test_loss"] is None and off["test_bpb"] is None
        assert on["val_loss"] == off["val_loss"] and on["val_bpb"] == off["val_bpb"]
        assert math.isfinite(on["test_loss"]) and on["test_loss"] != on["val_loss"]
        assert on["test_bpb"] == pytest.approx(on["test_loss"] / math.log(2))  # bytes: a token is a byte
    assert rows[True][4]["test_loss"] < rows[True][1]["test_loss"]  # more loops help on test too
