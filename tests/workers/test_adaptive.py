"""The adaptive job (workers/adaptive/job.py) on a tiny trained model: its limits reproduce the depth sweep
exactly, latest is per_round's function with smaller KV needs, the histograms count every token, the
FLOPs follow model/flops.py, tasks and decode timings come per cell; bad specs are refused by name; its
rows go through the writer into the schema and the `adaptive` view on both backends."""

from __future__ import annotations

import math

import pytest

from looplab.model.errors import ConfigError
from looplab.model.exit_names import CellKey
from looplab.model.flops import fixed_depth_flops
from looplab.workers.adaptive import job as adaptive
from looplab.workers.reporter import MemoryReporter

SPEC = {
    "rules": {"state": [0, "inf", 0.05], "kl": [0, 0.01], "argmax": ["inf", 0, 2]},
    "kv_strategies": ["per_round", "latest", "first", "last_m"],
    "kv_m": 1,
    "max_rounds": 4,
    "eval_tokens": 512,
    "batch_size": 8,
    "tasks": ["deduction"],
    "n_per_subset": 2,
    "decode_steps": 3,
    "decode_warmup": 1,
    "decode_prompt": 8,
    "decode_batch_sizes": [1, 2],
    "device": "cpu",
}


@pytest.fixture(scope="module")
def result(trained_fixed4, tmp_path_factory):
    out = tmp_path_factory.mktemp("adaptive")
    spec = adaptive.Spec.from_dict({**SPEC, "checkpoint": str(trained_fixed4[0])})
    reporter = MemoryReporter()
    return adaptive.run(spec, reporter, out), reporter


def sweep_losses(trained, loops: list[int], out) -> dict[int, float]:
    """The depth sweep's validation loss per loop count on the adaptive job's validation tokens."""
    from looplab.workers.evaluate import depth_sweep

    common = {"eval_tokens": 512, "batch_size": 8, "interaction_loops": [], "device": "cpu"}
    spec = depth_sweep.Spec.from_dict({**common, "checkpoint": str(trained[0]), "loops": loops})
    return {e["loops"]: e["val_loss"] for e in depth_sweep.run(spec, MemoryReporter(), out)["depth_evals"]}


@pytest.fixture(scope="module")
def sweep(trained_fixed4, tmp_path_factory):
    return sweep_losses(trained_fixed4, [2, 4], tmp_path_factory.mktemp("sweep"))


def rows_of(out, strategy="per_round"):
    return {CellKey.parse(r["config"]).rule: r for r in out["adaptive_evals"] if r["kv_strategy"] == strategy}


def test_the_limits_reproduce_the_depth_sweep_exactly(result, sweep):
    out, _ = result
    cells = rows_of(out)
    for never in ("fixed", "state<0", "kl<0", "argmax>=inf"):  # threshold 0 / k = inf: the fixed depth 4
        assert cells[never]["val_loss"] == sweep[4] and cells[never]["mean_rounds"] == 4, never
    for always in ("state<inf", "argmax>=0"):  # an infinite threshold / k = 0: min_rounds = 2
        assert cells[always]["val_loss"] == sweep[2] and cells[always]["mean_rounds"] == 2, always
    assert cells["state<inf"]["forward_flops_per_token"] == fixed_depth_flops_of(result, 2)
    assert cells["state<inf"]["equivalent_rounds"] == pytest.approx(2.0)
    assert cells["kl<0"]["rule_flops_per_token"] > 0 == cells["state<0"]["rule_flops_per_token"]  # readouts
    assert 2 < cells["kl<0.01"]["mean_rounds"] < 4  # the rule stops tokens at different rounds


def test_the_fixed_depth_loss_is_the_depth_sweeps_in_micro_batches(trained_fixed4, sweep, tmp_path):
    """The adaptive job's losses come from the depth sweep's loop (`workers.validation.evaluate`), micro-
    batches included. In forwards of 3 sequences (each batch of 8 as 3 + 3 + 2) its fixed depth 4 is the
    sweep's loss at 4 loops in the same forwards exactly: the same forwards and per-forward sums, added in
    the same order. Against the sweep in whole batches it agrees to float rounding only: there the fp32
    sum runs over 8 sequences at once instead of three partial sums added in double."""
    from looplab.workers.evaluate import depth_sweep

    common = {"checkpoint": str(trained_fixed4[0]), "eval_tokens": 512, "batch_size": 8, "device": "cpu"}
    micro = {**common, "micro_batch_size": 3}
    sweep_spec = depth_sweep.Spec.from_dict({**micro, "loops": [4], "interaction_loops": []})
    (swept,) = depth_sweep.run(sweep_spec, MemoryReporter(), tmp_path / "sweep")["depth_evals"]
    spec = adaptive.Spec.from_dict(
        {**micro, "rules": {"state": [0]}, "kv_strategies": ["per_round"], "max_rounds": 4}
    )
    out = adaptive.run(spec, MemoryReporter(), tmp_path / "adaptive")
    cells = rows_of(out)
    for name in ("fixed", "state<0"):
        assert cells[name]["val_loss"] == swept["val_loss"] and cells[name]["val_bpb"] == swept["val_bpb"], (
            name
        )
        assert cells[name]["val_loss"] == pytest.approx(sweep[4], rel=1e-6, abs=0), name
    for split in ("position", "loss"):  # every token's exit counted once, the loss buckets row by row
        counts = [h["count"] for h in out["adaptive_exit_rounds"] if h["split"] == split]
        assert sum(counts) == 2 * 512, split  # two cells


def fixed_depth_flops_of(result, rounds):
    from looplab.model.presets import preset
    from tests.workers.conftest import TINY_MODEL

    return fixed_depth_flops(preset("fixed4", "tiny", **TINY_MODEL), rounds, 32)


def test_latest_is_per_rounds_function_and_first_and_last_m_are_marked(result):
    out, _ = result
    per_round, latest = rows_of(out), rows_of(out, "latest")
    for name, row in per_round.items():
        assert latest[name]["val_loss"] == row["val_loss"] and latest[name]["kv_mib"] == row["kv_mib"]
        assert latest[name]["kv_mib_needed"] <= row["kv_mib_needed"] == row["kv_mib"]
    assert latest["state<inf"]["kv_mib_needed"] < per_round["state<inf"]["kv_mib_needed"]
    first, last = rows_of(out, "first"), rows_of(out, "last_m")
    assert all(r["changes_function"] for r in [*first.values(), *last.values()])
    assert not any(r["changes_function"] for r in per_round.values())
    assert first["fixed"]["kv_mib"] < last["fixed"]["kv_mib"] < per_round["fixed"]["kv_mib"]
    assert first["fixed"]["val_loss"] != per_round["fixed"]["val_loss"]  # a different function
    assert out["kv_bytes"]["first"] < out["kv_bytes"]["per_round"]


def test_the_histograms_count_every_token_once_per_split(result):
    out, _ = result
    for row in out["adaptive_evals"]:
        hist = [h for h in out["adaptive_exit_rounds"] if h["config"] == row["config"]]
        for split in ("position", "loss"):
            counts = [(h["round"], h["count"]) for h in hist if h["split"] == split]
            assert sum(c for _, c in counts) == row["tokens"] == 512
            assert sum(r * c for r, c in counts) / row["tokens"] == pytest.approx(row["mean_rounds"])
    positions = {
        h["bucket"]: (h["bucket_lo"], h["bucket_hi"])
        for h in out["adaptive_exit_rounds"]
        if h["split"] == "position"
    }
    assert positions[0] == (0, 4) and positions[7] == (28, 32)
    assert all(
        math.isinf(h["bucket_hi"])
        for h in out["adaptive_exit_rounds"]
        if h["split"] == "loss" and h["bucket"] == 5
    )


def test_tasks_and_decode_timings_per_cell(result):
    out, reporter = result
    n_cells = len(out["adaptive_evals"])
    assert n_cells == 4 * (1 + 3 + 2 + 3)
    whole = [r for r in out["adaptive_task_scores"] if r["subset"] == "all"]
    assert len(whole) == n_cells and all(r["task"] == "deduction" and r["n"] == 12 for r in whole)
    decodes = out["adaptive_decodes"]
    assert len(decodes) == n_cells * 2 * 2  # batch sizes 1, 2 x modes masked, batch_stop
    by = {(d["config"], d["batch_size"], d["mode"]): d for d in decodes}
    assert by[("fixed | per_round", 2, "masked")]["speedup"] == 1.0
    early = by[("state<inf | per_round", 2, "batch_stop")]
    assert early["mean_exit_round"] == 2 and early["mean_step_rounds"] == 2  # every row stops at round 2
    assert by[("state<inf | per_round", 2, "masked")]["mean_step_rounds"] == 4  # masked: every round runs
    assert len(reporter.of("result")) == sum(len(out[t]) for t in adaptive.TABLES)


@pytest.fixture(scope="module")
def every_depth(trained_fixed4, tmp_path_factory):
    """The depth sweep's validation loss at 1..4 loops: the per_round fixed depths, computed apart."""
    return sweep_losses(trained_fixed4, [1, 2, 3, 4], tmp_path_factory.mktemp("every_depth"))


def test_decode_rows_name_the_fixed_depth_at_equal_loss(result, every_depth):
    """Each decode row carries the shallowest fixed depth whose loss is at most the cell's (under
    per_round and latest: against the depth sweep's losses at 1..4 loops, computed apart) and that
    depth's decode time, timed once per strategy, batch, mode and depth; the fixed cell's depth is 4
    unless a shallower one really is as good."""
    out, _ = result
    loss = {r["config"]: r["val_loss"] for r in out["adaptive_evals"]}
    by = {(d["config"], d["batch_size"], d["mode"]): d for d in out["adaptive_decodes"]}
    timings: dict[tuple, set] = {}
    for (config, batch, mode), d in by.items():
        depth, key = d["equal_loss_rounds"], CellKey.parse(config)
        assert depth is None or (1 <= depth <= 4 and d["equal_loss_ms_per_token"] > 0), d
        assert (depth is None) == (d["equal_loss_ms_per_token"] is None)
        timings.setdefault((key.strategy, batch, mode, depth), set()).add(d["equal_loss_ms_per_token"])
        if key.strategy in ("per_round", "latest"):
            want = min((r for r, v in every_depth.items() if v <= loss[config]), default=None)
            assert depth == want, d
        if key.rule == "fixed":  # never worse than itself: some depth up to 4 is as good
            assert depth is not None
            if depth == 4:
                assert d["equal_loss_ms_per_token"] == d["fixed_ms_per_token"]
    assert all(len(ms) == 1 for ms in timings.values()), timings
    # this tiny model is best at 2 loops (the sweep's 1..4: 2.334, 2.327, 2.330, 2.332), so its fixed
    # depth 4 is matched by 2 rounds; 1 round is worse than every per_round cell
    fixed = by[("fixed | per_round", 1, "masked")]
    assert every_depth[2] < every_depth[4] < every_depth[1] and fixed["equal_loss_rounds"] == 2
    # a rule stopping every token at round 2 is the strategy's own fixed depth 2: as good as it, or shallower
    for strategy in ("per_round", "first", "last_m1"):
        assert by[(f"state<inf | {strategy}", 2, "batch_stop")]["equal_loss_rounds"] <= 2, strategy


def test_the_equal_loss_depth_is_the_shallowest_no_worse():
    from looplab.workers.adaptive.decode import equal_loss_depth

    losses = {1: 3.0, 2: 2.5, 3: 2.4, 4: 2.35}
    assert [equal_loss_depth(losses, x) for x in (5.0, 2.5, 2.45, 2.35)] == [1, 2, 3, 4]
    assert equal_loss_depth(losses, 2.3) is None  # better than every fixed depth
    assert equal_loss_depth({1: 2.0, 2: 1.5, 3: 1.7}, 1.8) == 2  # not monotone: the shallowest that is


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rules": {"halt": [0.1]}}, "rules: unknown 'halt'; accepted: state, kl, entropy, argmax, gate"),
        ({"rules": {"kl": [-1]}}, "rules.kl: must be >= 0.0"),
        ({"rules": {"argmax": [2.5]}}, "exit.threshold: argmax counts rounds"),
        ({"rules": {"kl": []}}, "rules.kl: expected a non-empty list of thresholds"),
        ({"rules": {}}, "rules: expected a mapping of state"),
        ({"min_rounds": 1}, "min_rounds: must be >= 2"),
        ({"min_rounds": 3, "max_rounds": 2}, "max_rounds: must be >= 3"),
        (
            {"kv_strategies": ["Per Round"]},
            "kv_strategies: 'Per Round': expected a non-empty list of per_round, latest, first, last_m or",
        ),
        ({"kv_strategies": []}, "kv_strategies: expected a non-empty list of per_round"),
        ({"kv_strategies": ["a_name_of_17_chars"]}, "at most 16 characters"),
        ({"kv_m": 0}, "kv_m: must be >= 1"),
        ({"tasks": ["harness:sciq"]}, "tasks: harness tasks are not scored with exits"),
        ({"tasks": ["trivia"]}, "tasks: unknown 'trivia'"),
        ({"rulez": {}}, "adaptive: unknown key 'rulez'"),
    ],
)
def test_bad_specs_are_refused_by_name(change, message):
    with pytest.raises(ConfigError, match=message):
        adaptive.Spec.from_dict(change)


def test_a_name_no_kv_strategy_of_looplab_s_model_is_refused_when_the_job_starts(trained_fixed4, tmp_path):
    """A well-formed name (a family's cache may offer it) on looplab's own model: refused naming the field
    once the model is known, before any row is written (at submission for a follow-up: test_submit)."""
    spec = adaptive.Spec.from_dict({"checkpoint": str(trained_fixed4[0]), "kv_strategies": ["paged"]})
    reporter = MemoryReporter()
    with pytest.raises(ConfigError, match="kv_strategies: paged: not a KV strategy of looplab's model"):
        adaptive.run(spec, reporter, tmp_path)
    assert not reporter.of("result")


def test_spec_defaults_and_infinity():
    spec = adaptive.Spec.from_dict({"rules": {"state": ["inf", 0.1, 0.1]}})
    assert spec.rules == {"state": [0.1, math.inf]}
    assert spec.kv_strategies == ["per_round", "latest", "first", "last_m"]  # every strategy, as stored
    assert adaptive.Spec.from_dict({}).to_dict() == adaptive.Spec().to_dict() | {
        "rules": adaptive.DEFAULT_RULES
    }


def test_the_rows_go_through_the_writer_into_the_schema_and_views(result, migrated_db_url, tmp_path):
    """On SQLite and PostgreSQL: the job's events as the driver's writer persists them, read back by
    `orchestrator.frames` with the trained model's identity (an infinite threshold included)."""
    from looplab.orchestrator import Grid, Queue, frames, jobqueue
    from looplab.orchestrator.writer import write_events
    from tests.workers.conftest import tiny_spec

    out, reporter = result
    q = Queue(db=migrated_db_url, artifacts=tmp_path / "art")
    train_id, job_id = q.submit(Grid("ad", base=tiny_spec(), then=["adaptive"], follow={"adaptive": SPEC}))
    attempt = jobqueue.claim(q.eng, job_id, "w", str(tmp_path / "job"))
    write_events(q.eng, [(job_id, attempt, reporter.events)])
    evals = frames.adaptive(q.url)
    assert len(evals) == len(out["adaptive_evals"]) and set(evals["train_job_id"]) == {train_id}
    assert set(evals["recipe"]) == {"fixed4"} and evals["variant_id"].notna().all()
    inf = evals[evals["config"] == "state<inf | per_round"]
    assert math.isinf(inf["threshold"].iloc[0]) and inf["mean_rounds"].iloc[0] == 2
    assert evals.loc[evals["rule"] == "fixed", "threshold"].isna().all()
    assert len(frames.exit_rounds(q.url)) == len(out["adaptive_exit_rounds"])
    assert len(frames.adaptive_tasks(q.url)) == len(out["adaptive_task_scores"])
    assert len(frames.adaptive_decodes(q.url)) == len(out["adaptive_decodes"])
    view = q.results("adaptive")
    assert len(view) == len(evals) and set(view["adaptive_job_id"]) == {job_id}
