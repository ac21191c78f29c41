"""`looplab export`: runs out to MLflow, TensorBoard, W&B (offline) and Parquet, each read back by the
tool's own reader (MlflowClient, TensorBoard's EventAccumulator, `wandb leet inspect`, pandas), with no
network: each target's first export (and every W&B one) runs as `looplab export` in a network namespace
with no interface (`unshare -n`) where this machine allows it, else with every proxy variable unset and
W&B offline; the exports again and the refusals run the same command in-process (`tests/cli.py`).

The database is the dashboard tests' fixture (11 training runs with curves, sweeps, decode benches; one
run still running at step 15). Exporting again after new points and a new job writes only those.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.cli import looplab_here
from tests.dashboard.conftest import ARCH, build_fixture_db
from tests.orchestrator import fake_jobs

ROOT = Path(__file__).resolve().parents[2]
LOOPLAB = [sys.executable, "-m", "looplab"]
RUNNING_JOB = 18  # the fixture's running train job (lean seed 2): points at steps 1..15
ADDED_JOB = 100  # the job `grow` adds


def _network_namespace() -> list[str]:
    try:
        ok = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return ["unshare", "-n"] if ok else []


OFFLINE = _network_namespace()
ENV = {
    k: v
    for k, v in os.environ.items()
    if "proxy" not in k.lower() and not k.startswith(("MLFLOW_", "WANDB_"))
}
ENV.update(PYTHONPATH=str(ROOT), WANDB_MODE="offline", HF_HUB_OFFLINE="1", NO_PROXY="*")


def looplab(db: Path, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [*OFFLINE, *LOOPLAB, "--db", str(db), *args],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def source_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("export_src") / "looplab.db"
    build_fixture_db(path)
    return path


@pytest.fixture
def db(source_db, tmp_path) -> Path:
    """A private copy of the fixture database (the tests add to it)."""
    path = tmp_path / "looplab.db"
    with sqlite3.connect(source_db) as src, sqlite3.connect(path) as dst:
        src.backup(dst)
    return path


def points(db: Path, job_id: int | None = None) -> pd.DataFrame:
    """Every metric point in the database (job_id, key, step, wall_s, value), read with sqlite3."""
    where = "" if job_id is None else f"WHERE job_id = {int(job_id)}"
    with sqlite3.connect(db) as conn:
        return pd.read_sql(
            f"SELECT job_id, key, step, wall_s, value FROM metrics {where} ORDER BY job_id, key, step", conn
        )


def started_train_jobs(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM jobs WHERE kind = 'train' AND status != 'queued'")]


def grow(db: Path) -> int:
    """The running job reports steps 16..20 and succeeds; a new job (id ADDED_JOB) reports 10 points.
    Returns the number of new points."""
    now = time.time()
    with sqlite3.connect(db) as conn:
        rows = [(RUNNING_JOB, "train_loss", s, s * 20_000, float(s), 3.0 + 1.0 / s) for s in range(16, 21)]
        conn.execute("UPDATE jobs SET status = 'succeeded', finished_at = ? WHERE id = ?", (now, RUNNING_JOB))
        conn.execute(
            "INSERT INTO train_results (job_id, steps, tokens, train_seconds, final_val_loss) "
            "VALUES (?, 20, 400000, 20.0, 3.05)",
            (RUNNING_JOB,),
        )
        cols = {**ARCH, "variant_id": "abc", "variant_label": "fixed4", "loop_sampler": "fixed", "loops": 4}
        conn.execute(
            f"INSERT INTO jobs (id, grid_id, kind, config, config_hash, recipe, size, seed, status, priority, "
            f"attempts, max_attempts, created_at, started_at, {', '.join(cols)}) VALUES "
            f"(?, 1, 'train', '{{}}', 'added', 'fixed4', 'tiny', 0, 'running', 0, 1, 3, ?, ?, "
            f"{', '.join('?' * len(cols))})",
            (ADDED_JOB, now, now, *cols.values()),
        )
        rows += [(ADDED_JOB, "train_loss", s, s * 100, float(s), 4.0 - 0.1 * s) for s in range(1, 11)]
        conn.executemany(
            "INSERT INTO metrics (job_id, key, step, tokens, wall_s, value) VALUES (?, ?, ?, ?, ?, ?)", rows
        )
        for job_id, key, step, tokens, wall, value in rows:
            conn.execute(
                "INSERT INTO latest_metrics (job_id, key, step, tokens, wall_s, value) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (job_id, key) DO UPDATE SET step = excluded.step, value = excluded.value",
                (job_id, key, step, tokens, wall, value),
            )
    return len(rows)


def depth_rows(db: Path) -> dict[int, dict[int, float]]:
    with sqlite3.connect(db) as conn:
        got: dict[int, dict[int, float]] = {}
        for train, loops, loss in conn.execute(
            "SELECT d.depends_on, e.loops, e.val_loss FROM depth_evals e "
            "JOIN job_deps d ON d.job_id = e.job_id"
        ):
            got.setdefault(train, {})[loops] = loss
        return got


# ---------------------------------------------------------------- MLflow


def mlflow_runs(out: Path) -> tuple:
    """(MlflowClient of the store, its runs by looplab job id)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out / 'mlflow.db'}")
    exps = client.search_experiments()
    runs = client.search_runs([e.experiment_id for e in exps], max_results=1000)
    by_job = {int(r.data.tags["looplab.job_id"]): r for r in runs}
    assert len(by_job) == len(runs), "an MLflow run per job, never two"
    return client, by_job


def assert_mlflow_history(client, run, want: pd.DataFrame) -> None:
    for key, part in want.groupby("key"):
        name = key.replace("@", "_at_")
        got = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, name))
        assert got == list(zip(part["step"], part["value"], strict=True)), (
            run.data.tags["looplab.job_id"],
            key,
        )


@pytest.mark.slow  # docs/testing.md: MLflow's client and its store start in a subprocess
def test_mlflow_export_is_read_back_by_mlflows_client_with_every_point(db, tmp_path, capsys):
    out = tmp_path / "mlflow"
    looplab(db, "export", "mlflow", "-o", str(out))
    client, runs = mlflow_runs(out)
    assert sorted(runs) == sorted(started_train_jobs(db))
    all_points, depth = points(db), depth_rows(db)
    for job_id, run in runs.items():
        assert_mlflow_history(client, run, all_points[all_points["job_id"] == job_id])
        if job_id in depth:
            got = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "depth/val_loss")}
            assert got == depth[job_id]
    parcae = runs[1]
    assert (
        parcae.data.tags["looplab.grid"] == "study" and parcae.data.tags["looplab.variant_label"] == "parcae"
    )
    assert parcae.data.tags["looplab.seed"] == "0" and parcae.info.status == "FINISHED"
    assert parcae.data.params["variant.n_rec"] == "80000" and parcae.data.params["recipe"] == "parcae"
    assert parcae.data.metrics["result.final_val_loss"] == 3.20
    assert (
        runs[RUNNING_JOB].info.status == "RUNNING"
        and "result.final_val_loss" not in runs[RUNNING_JOB].data.metrics
    )
    assert runs[19].info.status == "FAILED"  # the fixture's failed job

    # again, after new points and a new job: only those are written, no run twice
    new = grow(db)
    second = looplab_here(capsys, "--db", db, "export", "mlflow", "-o", str(out))
    assert f"2 runs, {new} points" in second.stdout  # the running job (now finished) and the new one
    client, runs = mlflow_runs(out)
    assert sorted(runs) == sorted(started_train_jobs(db)) and ADDED_JOB in runs
    all_points = points(db)
    for job_id in (RUNNING_JOB, ADDED_JOB):
        assert_mlflow_history(client, runs[job_id], all_points[all_points["job_id"] == job_id])
    assert (
        runs[RUNNING_JOB].info.status == "FINISHED"
        and runs[RUNNING_JOB].data.metrics["result.final_val_loss"] == 3.05
    )
    assert "nothing new" in looplab_here(capsys, "--db", db, "export", "mlflow", "-o", str(out)).stdout


def test_resolved_config_is_the_train_specs_with_every_default():
    from looplab.lab.export.source import flatten, resolved_config
    from looplab.workers.train.spec import Spec

    stored = {"recipe": "fixed4", "size": "tiny", "tokens": 1000, "model": {"loops": 8}}
    flat = flatten(resolved_config(stored))
    assert flat["model.loops"] == 8 and flat["model.d_model"] == 64 and flat["lr"] == Spec.lr
    assert flat["batch_size"] == Spec.batch_size and flat["data.tokenizer"] == "byte"
    assert resolved_config({"steps": 6}) == {"steps": 6}  # a spec this code cannot read: as stored


# ---------------------------------------------------------------- TensorBoard


def tensorboard_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})  # 0: keep every event
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}, acc


def as_float32(values) -> list[float]:
    return [float(np.float32(v)) for v in values]


def test_tensorboard_export_is_read_back_by_tensorboards_reader_with_every_point(db, tmp_path, capsys):
    out = tmp_path / "tb"
    looplab(db, "export", "tensorboard", "-o", str(out))
    manifest = json.loads((out / "looplab-export.json").read_text())
    dirs = {int(k): out / v["run"] for k, v in manifest["jobs"].items()}
    assert sorted(dirs) == sorted(started_train_jobs(db))
    all_points, depth = points(db), depth_rows(db)
    for job_id, run_dir in dirs.items():
        scalars, acc = tensorboard_scalars(run_dir)
        for key, part in all_points[all_points["job_id"] == job_id].groupby("key"):
            assert scalars[key] == list(zip(part["step"], as_float32(part["value"]), strict=True)), (
                job_id,
                key,
            )
        if job_id in depth:
            assert dict(scalars["depth/val_loss"]) == dict(
                zip(depth[job_id], as_float32(depth[job_id].values()))
            )
        assert "config/text_summary" in acc.Tags()["tensors"] or "config" in acc.Tags()["tensors"]
    assert dirs[1].relative_to(out).as_posix() == "study/1-parcae-seed0"
    assert tensorboard_scalars(dirs[1])[0]["result/final_val_loss"] == [(50, float(np.float32(3.20)))]

    new = grow(db)
    second = looplab_here(capsys, "--db", db, "export", "tensorboard", "-o", str(out))
    assert f"2 runs, {new} points" in second.stdout
    files = sorted(
        (out / json.loads((out / "looplab-export.json").read_text())["jobs"][str(RUNNING_JOB)]["run"]).glob(
            "events.out.tfevents.*"
        )
    )
    assert len(files) == 2  # the first export's file and one with only the new points and the results
    scalars, _ = tensorboard_scalars(dirs[RUNNING_JOB])
    want = points(db, RUNNING_JOB)
    want = want[want["key"] == "train_loss"]
    assert scalars["train_loss"] == list(
        zip(want["step"], as_float32(want["value"]), strict=True)
    )  # once each


# ---------------------------------------------------------------- W&B


def test_an_event_file_opened_within_the_second_of_the_last_one_waits_until_it_sorts_after_it(tmp_path):
    """TensorBoard reads a run's event files in name order, and a name begins with its second: a second
    file of the same second from a lower pid (or a higher per-process counter, as `--follow` makes)
    would sort first and TensorBoard would drop the first file's steps as out of order. Both scalars of
    two files written back to back are read, in order."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from looplab.lab.export.to_tensorboard import _wait_past_newest

    run = tmp_path / "run"
    run.mkdir()
    ahead = int(time.time()) + 1  # a file of the next second, of a process with a high pid
    for step, name in ((1, f"events.out.tfevents.{ahead}.vm.99999.9.looplab1"), (2, None)):
        if name is None:
            _wait_past_newest(run)
            writer = EventFileWriter(str(run), filename_suffix=".looplab1")
        else:
            writer = EventFileWriter(str(tmp_path / "elsewhere"), filename_suffix=".looplab1")
        value = Summary.Value(tag="train_loss", simple_value=float(step))
        writer.add_event(Event(wall_time=time.time(), step=step, summary=Summary(value=[value])))
        writer.close()
        if name is not None:
            (written,) = (tmp_path / "elsewhere").glob("events.out.tfevents.*")
            written.rename(run / name)
    assert sorted(p.name for p in run.iterdir())[0].startswith(f"events.out.tfevents.{ahead}.")
    assert tensorboard_scalars(run)[0]["train_loss"] == [(1, 1.0), (2, 2.0)]


def wandb_records(run_dir: Path) -> list[dict]:
    """Every record of an offline run's .wandb file, as W&B's own reader prints them."""
    (log,) = run_dir.glob("run-*.wandb")
    tool = Path(sys.executable).parent / "wandb"
    out = subprocess.run(
        [*OFFLINE, str(tool), "leet", "inspect", "--json", str(log)],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def wandb_history(records: list[dict]) -> dict[str, list[tuple[int, float]]]:
    got: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if r["type"] == "history":
            step = r["history"]["step"]["num"] if "num" in r["history"].get("step", {}) else 0
            for key, value in r["history"]["item"].items():
                if not key.startswith("_") and key not in ("tokens", "wall_s"):
                    got.setdefault(key, []).append((int(step), value))
    return got


def offline_dirs(out: Path) -> dict[str, list[Path]]:
    """W&B run id -> its offline directories, oldest first."""
    dirs: dict[str, list[Path]] = {}
    for d in sorted((out / "wandb").glob("offline-run-*")):
        dirs.setdefault(d.name.split("-", 3)[3], []).append(d)
    return dirs


@pytest.mark.slow  # docs/testing.md: W&B's own reader, two export subprocesses
def test_wandb_offline_runs_are_read_back_by_wandbs_own_reader_with_every_point(db, tmp_path):
    out = tmp_path / "wb"
    looplab(db, "export", "wandb", "-o", str(out))
    manifest = json.loads((out / "looplab-export.json").read_text())
    ids = {int(k): v["run"] for k, v in manifest["jobs"].items()}
    dirs = offline_dirs(out)
    assert sorted(ids) == sorted(started_train_jobs(db)) and set(dirs) == set(ids.values())
    all_points, depth = points(db), depth_rows(db)
    for job_id, run_id in ids.items():
        (run_dir,) = dirs[run_id]
        records = wandb_records(run_dir)
        history = wandb_history(records)
        mine = all_points[all_points["job_id"] == job_id]
        if job_id == RUNNING_JOB:  # its newest step is held back until it is complete
            mine = mine[mine["step"] < mine["step"].max()]
        for key, part in mine.groupby("key"):
            assert history[key] == list(zip(part["step"], part["value"], strict=True)), (job_id, key)
        assert set(history) == set(mine["key"])
        run = next(r["run"] for r in records if r["type"] == "run")
        assert run["project"] == "study" and run["run_id"] == run_id
        summary = {
            k: v for r in records if r["type"] == "summary" for k, v in r["summary"].get("update", {}).items()
        }
        for loops, loss in depth.get(job_id, {}).items():
            assert summary[f"depth/val_loss@{loops}"] == loss
    run = next(r["run"] for r in wandb_records(dirs[ids[1]][0]) if r["type"] == "run")
    config = run["config"]["update"]
    # the fixture's stored configs are no train specs, so they are exported as stored (see the next test)
    assert config["recipe"] == "parcae" and config["looplab"]["variant_label"] == "parcae"
    assert config["looplab"]["n_rec"] == 80000 and config["looplab"]["job_id"] == 1

    grow(db)
    looplab(db, "export", "wandb", "-o", str(out))
    dirs = offline_dirs(out)
    first, again = dirs[ids[RUNNING_JOB]]  # a second offline directory of the same run: only what is new
    history = wandb_history(wandb_records(again))
    want = points(db, RUNNING_JOB)
    want = want[want["step"] >= 15]
    for key, part in want.groupby("key"):
        assert history[key] == list(zip(part["step"], part["value"], strict=True))
    assert len(dirs[ids[1]]) == 1  # a run with nothing new gets no new directory
    added = json.loads((out / "looplab-export.json").read_text())["jobs"][str(ADDED_JOB)]["run"]
    assert [s for s, _ in wandb_history(wandb_records(dirs[added][0]))["train_loss"]] == list(range(1, 10))


# ---------------------------------------------------------------- Parquet


def view(db: Path, name: str) -> pd.DataFrame:
    with sqlite3.connect(db) as conn:
        return pd.read_sql(f'SELECT * FROM "{name}"', conn)


def sort(df: pd.DataFrame) -> pd.DataFrame:
    """In row order, and a column with no value at all as None whatever it was typed (a Parquet part of
    only NULLs reads back as NaN once parts are combined; the view reads None: both are SQL NULL)."""
    df = df.sort_values(
        list(df.columns[:1]) + [c for c in ("key", "step", "loops", "round") if c in df]
    ).reset_index(drop=True)
    for c in [c for c in df.columns if df[c].isna().all()]:
        df[c] = pd.Series([None] * len(df), index=df.index, dtype=object)
    return df


def test_parquet_files_equal_the_views_and_again_only_new_points_are_written(db, tmp_path, capsys):
    from looplab.orchestrator.views import VIEW_NAMES

    out = tmp_path / "pq"
    looplab(db, "export", "parquet", "-o", str(out))
    for name in VIEW_NAMES:
        path = out / name if name == "curves" else out / f"{name}.parquet"
        got, want = pd.read_parquet(path), view(db, name)
        assert list(got.columns) == list(want.columns), name
        pd.testing.assert_frame_equal(sort(got), sort(want), check_dtype=name != "curves", obj=name)
    assert len(pd.read_parquet(out / "runs.parquet")) == 11 and len(pd.read_parquet(out / "curves")) > 600
    stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}

    new = grow(db)
    second = looplab_here(capsys, "--db", db, "export", "parquet", "-o", str(out))
    assert f"{new} curves" in second.stdout
    parts = sorted((out / "curves").glob("part-*.parquet"))
    assert len(parts) == 2 and len(pd.read_parquet(parts[1])) == new  # only the new points
    pd.testing.assert_frame_equal(
        sort(pd.read_parquet(out / "curves")), sort(view(db, "curves")), check_dtype=False
    )
    pd.testing.assert_frame_equal(sort(pd.read_parquet(out / "runs.parquet")), sort(view(db, "runs")))
    after = {p.name: p.stat().st_mtime_ns for p in out.glob("*.parquet")}
    assert after["runs.parquet"] != stamps["runs.parquet"]  # a new run and a finished one
    assert (
        after["decode.parquet"] == stamps["decode.parquet"]
        and after["depth.parquet"] == stamps["depth.parquet"]
    )


def test_a_grid_exports_only_its_jobs_and_bad_input_is_refused_by_name(db, tmp_path, capsys):
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO grids (id, name, spec, spec_hash, created_at) VALUES (2, 'other', '{}', 'o', 0)"
        )
        conn.execute("UPDATE jobs SET grid_id = 2 WHERE id IN (1, 2)")
    out = tmp_path / "one-grid"
    assert (
        looplab_here(capsys, "--db", db, "export", "parquet", "-o", str(out), "--grid", "other").returncode
        == 0
    )
    assert sorted(pd.read_parquet(out / "runs.parquet")["job_id"]) == [1, 2]
    assert set(pd.read_parquet(out / "curves")["job_id"]) == {1, 2}
    assert set(pd.read_parquet(out / "depth.parquet")["train_job_id"]) == {1, 2}

    bad = looplab_here(capsys, "--db", db, "export", "parquet", "-o", str(tmp_path / "x"), "--grid", "nope")
    assert (
        bad.returncode == 2
        and "export: grid 'nope' is not in the database; accepted: other, study" in bad.stderr
    )
    bad = looplab_here(capsys, "--db", db, "export", "mlflow", "-o", str(out))  # a Parquet export's directory
    assert bad.returncode == 2 and "holds an export of target 'parquet', not 'mlflow'" in bad.stderr
    other_db = tmp_path / "other.db"
    shutil.copy(db, other_db)
    bad = looplab_here(capsys, "--db", other_db, "export", "parquet", "-o", str(out))
    assert bad.returncode == 2 and "holds an export of database" in bad.stderr
    bad = looplab_here(capsys, "--db", db, "export", "parquet", "-o", str(db))
    assert bad.returncode == 2 and "not a directory" in bad.stderr


def test_the_targets_are_the_commands_choices_and_each_has_its_writer(tmp_path, capsys):
    import argparse

    from looplab.lab.cli import build_parser
    from looplab.lab.export import Target, export
    from looplab.model.errors import ConfigError

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    (target,) = [a for a in sub.choices["export"]._actions if a.dest == "target"]
    assert target.choices == ["mlflow", "tensorboard", "wandb", "parquet"] == list(Target)
    for name in Target:
        module = name.writer()
        assert module.__name__ == f"looplab.lab.export.to_{name}" and callable(module.export), name
    assert Target.MLFLOW.writer().how_to_read(tmp_path).startswith("read it: MlflowClient(")
    with pytest.raises(ConfigError) as e:  # the Python API checks the name the command line cannot
        export("sqlite:///unused.db", "csv", tmp_path)
    assert str(e.value) == "export: target: unknown 'csv'; accepted: mlflow, tensorboard, wandb, parquet"
    with pytest.raises(SystemExit) as e:
        looplab_here(capsys, "export", "csv", "-o", str(tmp_path))
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument target: invalid choice: 'csv'" in err and "'wandb'" in err, err


# ---------------------------------------------------------------- --follow beside a running queue


def test_follow_mirrors_a_running_queue_and_a_failing_mirror_leaves_it_untouched(tmp_path, ray_cluster):
    from looplab import Grid, Queue

    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=fake_jobs)
    ids = q.submit(
        Grid(
            "live",
            base={"tokens": 1000, "steps": 40, "step_s": 0.1, "ckpt_every": 10},
            sweep={"seed": [0, 1]},
        )
    )
    db = tmp_path / "q.db"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "curves").write_text("in the way")  # the curve parts cannot be written: every export fails

    def mirror(*args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [*OFFLINE, *LOOPLAB, "--db", str(db), "export", *args, "--follow", "--every", "0.5"],
            env=ENV,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    good, bad = mirror("parquet", "-o", str(tmp_path / "live")), mirror("parquet", "-o", str(broken))
    try:
        t0 = time.time()
        assert q.run(until_empty=True, progress=False, poll_s=0.2) == 0
        elapsed = time.time() - t0
        good_out, _ = good.communicate(timeout=120)
    finally:
        for p in (good, bad):
            if p.poll() is None:
                p.kill()
    bad_out = bad.communicate(timeout=30)[0]
    # the queue did its work, whatever the mirrors did
    st = q.status()
    assert set(st.loc[st["id"].isin(ids), "status"]) == {"succeeded"}
    assert elapsed < 120
    assert good.returncode == 0, good_out
    passes = [line for line in good_out.splitlines() if "export parquet:" in line]
    assert len(passes) >= 2 and passes[-1].endswith("0 job(s) active")
    assert any(
        "job(s) active" in line and not line.endswith(" 0 job(s) active") for line in passes
    )  # while it ran
    got = pd.read_parquet(tmp_path / "live" / "curves")
    want = view(db, "curves")
    pd.testing.assert_frame_equal(sort(got), sort(want), check_dtype=False)
    assert bad.returncode == 1 and bad_out.count("export to parquet failed") == 5, bad_out
