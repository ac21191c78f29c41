"""Preparations: a corpus in the hub's layout read through the same streaming path as a hub dataset,
`max_tokens` prefixes shared across budgets, the validation split fixed, resumable pieces (kill -9 of
`python -m looplab.workers.data.prepare`, then resume, gives the same bytes), parallel = serial, and the prepare job
the grid creates for train jobs that share a corpus (in-process here; through the real queue on Ray in
the slow test at the end)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from looplab.model.errors import ConfigError
from looplab.orchestrator.grid import PREPARE, Grid, assign_hashes, expand
from looplab.workers import jobs
from looplab.workers.data import corpus
from looplab.workers.data import prepare as prepare_job
from looplab.workers.data import shards as data
from looplab.workers.reporter import MemoryReporter
from tests.workers.conftest import tiny_spec

ROOT = Path(__file__).resolve().parents[2]
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we can their has been if more when will would "
    "who so no out up into do any your what some them other time only new about than may"
).split()


def write_hub_layout(root: Path, files: int, docs_per_file: int, seed: int = 0) -> Path:
    """A corpus laid out like a hub dataset: several parquet files with `text` and `id` columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(50, 400)))) for _ in range(docs_per_file)]
        ids = [f"<urn:doc:{f}:{i}>" for i in range(docs_per_file)]
        pq.write_table(
            pa.table({"text": texts, "id": ids}),
            root / f"train-{f:05d}-of-{files:05d}.parquet",
            row_group_size=64,
        )
    return root


@pytest.fixture(scope="module")
def hub_dir(tmp_path_factory) -> Path:
    return write_hub_layout(tmp_path_factory.mktemp("hub") / "sample-10BT", files=3, docs_per_file=400)


@pytest.fixture(scope="module")
def bpe_file(looplab_cache) -> str:
    """A small BPE tokenizer.json (trained on the offline corpus once per session)."""
    return str(data.prepare(data.DataSpec(tokenizer="bpe", vocab_size=512)).dir / "tokenizer.json")


@pytest.fixture
def own_cache(tmp_path, monkeypatch) -> Path:
    """A data cache of this test only, so each preparation here is built, not found."""
    path = tmp_path / "cache"
    monkeypatch.setenv("LOOPLAB_CACHE", str(path))
    return path


def _bytes(shards: data.Shards) -> tuple[bytes, bytes]:
    return np.asarray(shards.train).tobytes(), np.asarray(shards.val).tobytes()


def test_local_parquet_dir_streams_through_the_path_hub_data_takes(hub_dir, monkeypatch):
    import datasets

    real, calls = datasets.load_dataset, []

    def recording(path, *args, **kw):
        calls.append((path, kw.get("streaming")))
        if path == "HuggingFaceFW/fineweb-edu":  # the hub dataset, served from the same files
            return real(
                "parquet",
                data_files=sorted(map(str, hub_dir.glob("*.parquet"))),
                split="train",
                streaming=True,
            )
        return real(path, *args, **kw)

    monkeypatch.setattr(datasets, "load_dataset", recording)
    local = list(corpus.documents(str(hub_dir)))
    hub = list(corpus.documents("hf:HuggingFaceFW/fineweb-edu:sample-10BT"))
    assert calls == [("parquet", True), ("HuggingFaceFW/fineweb-edu", True)]
    assert local == hub and len(local) == 1200
    assert local[0][0] == "<urn:doc:0:0>" and local[400][0] == "<urn:doc:1:0>"  # files in order, ids kept
    assert corpus.row_count(str(hub_dir)) == 1200  # from the parquet footers, for progress


def test_max_tokens_is_honoured_and_a_stream_stops_there(hub_dir, own_cache, monkeypatch):
    monkeypatch.setattr(data, "VAL_TOKENS", 2000)  # a validation split small enough to fill early
    read = []

    def counting(c):
        for doc in corpus.documents(c):
            read.append(doc[0])
            yield doc

    monkeypatch.setattr(data, "documents", counting)
    s = data.prepare(data.DataSpec(corpus=str(hub_dir), tokenizer="byte", max_tokens=5000))
    assert len(s.train) == 5000 and s.meta["train"]["tokens"] == 5000 and len(s.val) == 2000
    assert s.meta["max_tokens"] == 5000 and not s.meta["exhausted"]
    # stopped reading (the corpus has 1,200 documents), at most one batch past the last one it needed
    assert s.meta["docs_read"] < 50 and len(read) <= s.meta["docs_read"] + data.BATCH_DOCS
    whole = "".join(t + data.DOC_SEP for d, t in corpus.documents(str(hub_dir)) if not corpus.is_val(d))
    assert np.asarray(s.train).astype(np.uint8).tobytes() == whole.encode()[:5000]  # the split's first bytes
    assert s.dir.name == "n5000"


def test_budgets_share_one_preparation_and_the_validation_split(hub_dir, own_cache):
    """A preparation of N tokens is the first N of any larger one; the val split is the same in all."""
    big = data.prepare(data.DataSpec(corpus=str(hub_dir), tokenizer="byte", max_tokens=200_000))
    count = data.TOKENIZE_COUNT
    small = data.prepare(data.DataSpec(corpus=str(hub_dir), tokenizer="byte", max_tokens=30_000))
    assert data.TOKENIZE_COUNT == count and small.dir == big.dir  # served by the larger one: no tokenizing
    assert len(small.train) == 30_000
    # built on its own, in another cache, it holds the same bytes
    os.environ["LOOPLAB_CACHE"] = str(own_cache.parent / "other")
    alone = data.prepare(data.DataSpec(corpus=str(hub_dir), tokenizer="byte", max_tokens=30_000))
    whole = data.prepare(data.DataSpec(corpus=str(hub_dir), tokenizer="byte"))
    assert data.TOKENIZE_COUNT == count + 1 + 1 and alone.dir.name == "n30000" and whole.dir.name == "all"
    assert _bytes(alone) == _bytes(small)
    assert np.asarray(whole.train[:200_000]).tobytes() == np.asarray(big.train).tobytes()
    assert _bytes(alone)[1] == _bytes(big)[1] == _bytes(whole)[1]  # the same validation documents
    assert alone.meta["val"]["docs"] == whole.meta["val"]["docs"] > 0


def test_more_tokens_than_the_corpus_has_is_the_whole_corpus_and_serves_any_size(hub_dir, own_cache):
    s = data.prepare(data.DataSpec(corpus=str(hub_dir), tokenizer="byte", max_tokens=10**9))
    assert s.meta["exhausted"] and s.meta["train"]["docs"] + s.meta["val"]["docs"] == 1200
    count = data.TOKENIZE_COUNT
    for n in (None, 10**10, 100):
        assert data.prepare(data.DataSpec(corpus=str(hub_dir), tokenizer="byte", max_tokens=n)).dir == s.dir
    assert data.TOKENIZE_COUNT == count


def test_tokenizer_processes_that_never_start_fail_the_preparation_by_name(bpe_file, tmp_path, monkeypatch):
    """A spawned worker first re-runs its parent's __main__; one that fails there dies before taking work
    and the pool keeps replacing it: the encoder says so after its timeout instead of waiting forever."""
    import types

    from looplab.workers.data import tokenizer

    script = tmp_path / "broken_main.py"
    script.write_text("raise SystemExit('this __main__ does not run in a child')\n")
    broken = types.ModuleType("__main__")
    broken.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", broken)
    monkeypatch.setattr(tokenizer, "RESULT_TIMEOUT_S", 5.0)
    tok = tokenizer.load_tokenizer(bpe_file)
    with tokenizer.ParallelEncoder(tok, 2, data.DOC_SEP, np.uint16) as encoder:
        with pytest.raises(RuntimeError, match="no result from the 2 tokenizer processes in 5 s"):
            list(encoder.map([["some text"]]))


def test_parallel_tokenization_equals_serial(hub_dir, bpe_file, own_cache):
    spec = data.DataSpec(corpus=str(hub_dir), tokenizer=bpe_file, max_tokens=60_000)
    serial = data.prepare(spec, processes=1, piece_docs=1000)
    os.environ["LOOPLAB_CACHE"] = str(own_cache.parent / "parallel")
    parallel = data.prepare(spec, processes=2, piece_docs=37)  # other pieces too: they change no byte
    assert parallel.dir != serial.dir and _bytes(parallel) == _bytes(serial)
    assert parallel.meta == serial.meta and int(np.asarray(serial.train).max()) < 512


def _prepare_cmd(hub_dir: Path, tokenizer: str, events: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "looplab.workers.data.prepare",
        "--corpus",
        str(hub_dir),
        "--tokenizer",
        tokenizer,
        "--max-tokens",
        "1e9",
        "--piece-docs",
        "20",
        "--processes",
        "1",
        "--events-jsonl",
        str(events),
        "--quiet",
    ]


@pytest.mark.slow
def test_kill_9_mid_preparation_then_resume_gives_the_uninterrupted_bytes(tmp_path, looplab_cache):
    """`python -m looplab.workers.data.prepare` killed with SIGKILL after some pieces, rerun: it resumes after the last
    committed piece (it says so) and ends with the shards an uninterrupted preparation writes."""
    corpus_dir = write_hub_layout(tmp_path / "big", files=2, docs_per_file=800, seed=1)
    # a tokenizer file by path: a BPE slow enough on 1,600 documents to be killed on the way
    tok = str(data.prepare(data.DataSpec(tokenizer="bpe", vocab_size=400)).dir / "tokenizer.json")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    killed = {**env, "LOOPLAB_CACHE": str(tmp_path / "killed")}
    proc = subprocess.Popen(
        _prepare_cmd(corpus_dir, tok, tmp_path / "a.jsonl"),
        env=killed,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    progress = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        found = list((tmp_path / "killed").glob("p2-*/n*/progress.json"))
        if found and json.loads(found[0].read_text())["docs"] >= 100:
            progress = found[0]
            break
        time.sleep(0.05)
    assert progress is not None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    committed = json.loads(progress.read_text())["docs"]
    assert committed >= 100 and not (progress.parent / "meta.json").exists()
    again = subprocess.run(
        _prepare_cmd(corpus_dir, tok, tmp_path / "b.jsonl"),
        env=killed,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0, again.stderr
    assert f"resuming the preparation in {progress.parent} after {committed:,} documents" in again.stderr
    whole = subprocess.run(
        _prepare_cmd(corpus_dir, tok, tmp_path / "c.jsonl"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**env, "LOOPLAB_CACHE": str(tmp_path / "whole")},
    )
    assert whole.returncode == 0, whole.stderr
    (done,) = (tmp_path / "whole").glob("p2-*/n*")
    for name in ("train.bin", "val.bin", "meta.json", "token_bytes.npy", "tokenizer.json"):
        assert (progress.parent / name).read_bytes() == (done / name).read_bytes(), name
    assert not (progress.parent / "progress.json").exists()
    events = [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    prog = [e for e in events if e["kind"] == "progress"]
    assert prog and prog[-1]["done"] == prog[-1]["total"] > 0  # tokens so far, as a train job's steps


def test_prepare_spec_and_cli_name_the_field(capsys):
    assert prepare_job.Spec.from_dict({"max_tokens": 2e6}).max_tokens == 2_000_000
    for bad, field in [
        ({"max_tokens": "budget"}, "max_tokens"),
        ({"max_tokens": 0}, "data.max_tokens"),
        ({"processes": 0}, "processes"),
        ({"corpus": "/no/such"}, "data.corpus"),
        ({"shards": 2}, "prepare: unknown key"),
    ]:
        with pytest.raises(ConfigError, match=field):
            prepare_job.Spec.from_dict(bad)
    assert prepare_job.main(["--max-tokens", "lots"]) == 2
    assert "data.max_tokens" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="data.max_tokens"):
        data.DataSpec.from_dict({"max_tokens": "all"})
    with pytest.raises(ConfigError, match="resolved from a train job"):
        data.prepare(data.DataSpec(max_tokens=data.BUDGET))


def test_budget_max_tokens_is_the_jobs_own_and_old_specs_keep_their_identity():
    from looplab.workers.train.spec import Spec

    s = Spec.from_dict(tiny_spec(tokens=8 * 32 * 20 + 5, data={"tokenizer": "byte", "max_tokens": "budget"}))
    assert s.data.max_tokens == 8 * 32 * 20 + 1  # whole steps' tokens, + the last target
    flops = Spec.from_dict(tiny_spec(tokens=None, flops=1e9, data={"max_tokens": "budget"}))
    assert flops.data.max_tokens == flops.budget_tokens() + 1 > 1
    timed = Spec.from_dict(tiny_spec(tokens=None, time_s=5.0, data={"max_tokens": "budget"}))
    assert timed.data.max_tokens is None  # a time budget reads the whole corpus
    old = tiny_spec()
    assert "max_tokens" not in Spec.from_dict(old).to_dict()["data"]  # unchanged identity, old hashes hold
    assert Spec.from_dict(Spec.from_dict(s.to_dict()).to_dict()) == s


def test_three_budgets_on_one_corpus_make_one_prepare_job_and_tokenize_once(hub_dir, own_cache, tmp_path):
    """The grid gives the three train jobs one prepare job sized for the largest (each job's identity
    is its own size: no dependency hash); after it ran, each trains on its own prefix, tokenizing nothing."""
    base = tiny_spec(
        eval_tokens=256, data={"corpus": str(hub_dir), "tokenizer": "byte", "max_tokens": "budget"}
    )
    del base["tokens"]
    budgets = [8 * 32 * 4, 8 * 32 * 8, 8 * 32 * 16]
    grid = Grid("three", base=base, sweep={"tokens": budgets}, resources={"prepare": {"num_cpus": 2}})
    plans = expand([grid], jobs)
    assign_hashes(plans, {})
    preps = [p for p in plans if p.kind == PREPARE]
    assert len(preps) == 1 and preps[0].spec["max_tokens"] == budgets[-1] + 1
    assert preps[0].resources == {"num_cpus": 2, "num_gpus": 0}
    trains = [p for p in plans if p.kind == "train"]
    assert all(p.waits == [plans.index(preps[0])] and p.deps == [] and p.dep_hashes == [] for p in trains)
    alone = expand([Grid("one", base={**base, "tokens": budgets[0]})], jobs)
    assign_hashes(alone, {})
    assert alone[0].config_hash == trains[0].config_hash  # its siblings do not change what it is
    count = data.TOKENIZE_COUNT
    rep = MemoryReporter()
    out = jobs.run(PREPARE, preps[0].spec, rep, tmp_path / "prep")
    assert out["train_tokens"] == budgets[-1] + 1 and (tmp_path / "prep" / "preparation.json").exists()
    assert rep.of("progress")[-1]["done"] == rep.of("progress")[-1]["total"] > 0
    for plan, n in zip(trains, budgets):
        row = jobs.run("train", plan.spec, MemoryReporter(), tmp_path / f"t{n}")
        assert row["tokens"] == n
    assert data.TOKENIZE_COUNT == count + 1
    again = MemoryReporter()
    jobs.run(PREPARE, preps[0].spec, again, tmp_path / "prep2")  # a second prepare job finds it done
    assert data.TOKENIZE_COUNT == count + 1


def test_a_resubmitted_part_of_a_grid_adds_no_prepare_job_and_a_new_job_gets_its_own(hub_dir, tmp_path):
    from looplab import Queue
    from looplab.lab.display import table
    from tests.db_rows import rows

    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    base = tiny_spec(data={"corpus": str(hub_dir), "tokenizer": "byte", "max_tokens": "budget"})
    del base["tokens"]
    first = q.submit(Grid("two", base=base, sweep={"tokens": [1024, 4096]}))
    assert len(first) == 3 and len(q.last_added) == 3
    lines = table(q.status()).splitlines()
    # by id: the prepare job (inserted before the jobs that wait for it) says nothing, the others name it
    waiting = [line.endswith(f"waiting for prepare job {first[2]}") for line in lines[1:4]]
    assert waiting == [False, True, True]
    assert "waiting for" not in lines[1] and lines[1].split()[:3] == [
        str(first[2]),
        "two",
        PREPARE,
    ]  # id, grid, kind
    assert q.submit(Grid("small", base={**base, "tokens": 1024})) == [first[0]] and q.last_added == []
    (new_train, new_prep) = q.submit(Grid("seed 1", base={**base, "tokens": 1024, "seed": 1}))
    assert q.last_added == [new_prep, new_train] and new_prep not in first  # sized for its own grid
    spec = json.loads(rows(q, "SELECT config FROM jobs WHERE id=:j", j=new_prep)[0][0])
    assert spec["max_tokens"] == 1025
    assert rows(q, "SELECT depends_on FROM job_deps WHERE job_id=:j", j=new_train) == [(new_prep,)]


def test_offline_corpus_prepared_whole_gets_no_prepare_job():
    plans = expand([Grid("plain", base=tiny_spec())], jobs)
    assert [p.kind for p in plans] == ["train"] and plans[0].waits == []
    plans = expand([Grid("part", base=tiny_spec(data={"max_tokens": 10_000}))], jobs)
    assert [p.kind for p in plans] == ["train", PREPARE] and plans[1].spec["corpus"] == "offline"


# ---------------------------------------------------------------------------------------- sampler


def test_permutation_sampler_visits_every_window_once_per_epoch():
    n_tokens, seq, batch = 32 * 37 + 1, 32, 8  # 37 windows: epochs end inside a step
    windows = (n_tokens - 1) // seq
    steps = 3 * windows // batch + 1
    offs = [data.window_offsets(n_tokens, batch, seq, 5, s, data.SAMPLER_PERMUTATION) for s in range(steps)]
    samples = np.concatenate(offs)
    for epoch in range(3):
        seen = samples[epoch * windows : (epoch + 1) * windows]
        assert sorted(seen.tolist()) == [w * seq for w in range(windows)], epoch
    assert samples[:windows].tolist() != samples[windows : 2 * windows].tolist()  # a new order each epoch
    # a pure function of (seed, step, row): recomputed out of order, or with the cache cleared
    data._permutation.cache_clear()
    assert (data.window_offsets(n_tokens, batch, seq, 5, 7, data.SAMPLER_PERMUTATION) == offs[7]).all()
    other = data.window_offsets(n_tokens, batch, seq, 6, 7, data.SAMPLER_PERMUTATION)
    assert not (other == offs[7]).all()
    one_row = data.window_offsets(n_tokens, 1, seq, 5, 7 * batch + 3, data.SAMPLER_PERMUTATION)
    assert one_row[0] == offs[7][3]  # row 3 of step 7 is global sample 59, however the batch is cut


def test_with_replacement_sampler_is_unchanged():
    rng = np.random.default_rng([3, 7, 0x10091AB])  # the generator sampler 1 always used
    expected = rng.integers(0, 5000 - 16 - 1, size=4)
    assert (data.window_offsets(5000, 4, 16, 3, 7) == expected).all()


def test_a_run_whose_checkpoint_predates_the_sampler_keeps_sampling_with_replacement(
    looplab_cache, tmp_path, monkeypatch
):
    """A checkpoint without `sampler` in its trainer state (written before samplers were versioned)
    resumes with replacement, whatever a new run of its spec would use: the curve of an uninterrupted
    with-replacement run. A new run on data sized to it samples without replacement."""
    from looplab.workers import checkpoint as ckpt
    from looplab.workers.artifacts import resume_from
    from looplab.workers.train import job as train
    from looplab.workers.train import trainer

    class StopAt(MemoryReporter):
        def should_stop(self):
            return len(self.curve("train_loss")) >= 5

    spec = train.Spec.from_dict(tiny_spec(tokens=8 * 32 * 10, data={"max_tokens": "budget"}))
    assert data.sampler_for(spec.data) == data.SAMPLER_PERMUTATION
    assert data.sampler_for(train.Spec.from_dict(tiny_spec()).data) == data.SAMPLER_WITH_REPLACEMENT
    monkeypatch.setattr(trainer, "sampler_for", lambda _: data.SAMPLER_WITH_REPLACEMENT)  # as it was
    whole = MemoryReporter()
    train.run(spec, whole, tmp_path / "whole")
    with pytest.raises(jobs.JobInterrupted):
        train.run(spec, StopAt(), tmp_path / "old")
    path = resume_from(tmp_path / "old")
    saved = ckpt.load(path)
    del saved["trainer"]["sampler"]  # as an old checkpoint has it
    ckpt.save(path, saved)
    monkeypatch.undo()  # today's trainer resumes it
    resumed = MemoryReporter()
    train.run(spec, resumed, tmp_path / "old")
    assert resumed.curve("train_loss") == whole.curve("train_loss")[5:]
    assert ckpt.load(resume_from(tmp_path / "old"))["trainer"]["sampler"] == data.SAMPLER_WITH_REPLACEMENT
    new = MemoryReporter()
    train.run(spec, new, tmp_path / "new")
    assert ckpt.load(resume_from(tmp_path / "new"))["trainer"]["sampler"] == data.SAMPLER_PERMUTATION
    assert new.curve("train_loss")[1:] != whole.curve("train_loss")[1:]


def test_a_smaller_bpe_than_asked_is_said_and_counted_at_its_size(looplab_cache, tmp_path):
    from looplab.workers.train import job as train

    spec = train.Spec.from_dict(tiny_spec(tokens=8 * 32 * 2, data={"tokenizer": "bpe", "vocab_size": 40_000}))
    rep = MemoryReporter()
    row = train.run(spec, rep, tmp_path)
    got = row["vocab_size"]
    assert row["vocab_size_asked"] == 40_000 and 256 < got < 40_000
    assert any(
        "asked a 40,000-token BPE, got" in e["message"] and e["level"] == "WARNING" for e in rep.of("log")
    )
    assert row["n_params"] == _params(spec, got) != _params(spec, 40_000)


def _params(spec, vocab: int) -> int:
    from looplab.model.counts import param_count

    return param_count(spec.model_config(vocab))["total"]


# ------------------------------------------------------------------------------- the real queue


@pytest.mark.slow
def test_train_jobs_sharing_a_corpus_wait_for_one_prepare_job_on_the_real_queue(tmp_path, ray_cluster):
    from looplab import Queue
    from looplab.lab.display import table
    from tests.db_rows import rows

    corpus_dir = write_hub_layout(tmp_path / "corpus", files=2, docs_per_file=300, seed=2)
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    base = tiny_spec(
        batch_size=4,
        eval_tokens=256,
        data={"corpus": str(corpus_dir), "tokenizer": "byte", "max_tokens": "budget"},
    )
    del base["tokens"]
    grid = Grid("shared", base=base, sweep={"tokens": [4 * 32 * 4, 4 * 32 * 8], "seed": [0, 1]})
    ids = q.submit(grid)
    st = q.status().set_index("id")
    (prep,) = st.index[st["kind"] == PREPARE]
    trains = list(st.index[st["kind"] == "train"])
    assert len(ids) == 5 and len(trains) == 4 and ids[-1] == prep
    assert rows(q, "SELECT job_id, depends_on FROM job_deps ORDER BY job_id") == [(t, prep) for t in trains]
    assert table(q.status()).count(f"waiting for prepare job {prep}") == 4  # `looplab status` says why
    assert q.submit(grid) == ids and q.last_added == []  # resubmitting adds nothing
    # a prepare job submitted on its own, on two processes inside a Ray worker
    (alone,) = q.submit(
        Grid("two-procs", job=PREPARE, base={"corpus": str(corpus_dir), "max_tokens": 3000, "processes": 2})
    )
    q.run(until_empty=True, progress=False, poll_s=0.2)
    st = q.status().set_index("id")
    assert set(st["status"]) == {"succeeded"}, st[["kind", "status", "error"]]
    ((started, done, total),) = rows(
        q, "SELECT started_at, progress_done, progress_total FROM jobs WHERE id=:j", j=prep
    )
    assert done == total == 4 * 32 * 8 + 1 + _val_tokens(corpus_dir)  # the progress of what it prepared
    assert all(s > started for (s,) in rows(q, "SELECT started_at FROM jobs WHERE kind='train'"))
    tokens = rows(q, "SELECT t.tokens, j.config FROM train_results t JOIN jobs j ON j.id = t.job_id")
    assert sorted(n for n, _ in tokens) == [512, 512, 1024, 1024]
    assert {json.loads(c)["data"]["max_tokens"] for _, c in tokens} == {513, 1025}
    assert st.loc[alone, "progress_done"] > 0
    (rate,) = rows(q, "SELECT value FROM latest_metrics WHERE job_id=:j AND key='tokens_per_s'", j=prep)[0]
    assert rate > 0  # the Queue page's tokens/s of the prepare job


def _val_tokens(corpus_dir: Path) -> int:
    """Validation tokens of a byte-level preparation of `corpus_dir` (all its validation documents)."""
    return sum(
        len((t + data.DOC_SEP).encode()) for d, t in corpus.documents(str(corpus_dir)) if corpus.is_val(d)
    )
