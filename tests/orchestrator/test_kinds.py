"""A job kind is declared in one place (workers.jobs.KINDS, read through orchestrator.jobkinds), and
iso-time pairing is decided in one (orchestrator.pairing).

The "one place" rule as a test that can fail: a kind declared only in a test registry's `KINDS` (a
checkpoint follow-up that runs alone and writes a result table, and an architecture follow-up) flows
through grid expansion, submission, job_resources, launch_spec, the writer and the views without any
other list naming it. No Ray: the job is run in-process with a MemoryReporter."""

from __future__ import annotations

import json
import re

import pytest
import sqlalchemy as sa

from looplab.model.errors import ConfigError
from looplab.orchestrator import Grid, Queue, jobkinds, jobqueue, pairing
from looplab.orchestrator.grid import expand
from looplab.orchestrator.schema import RESULT_TABLES, Base
from looplab.orchestrator.views import QUEUE_VIEWS, VIEW_NAMES
from looplab.orchestrator.writer import write_events
from looplab.workers import jobs
from looplab.workers.jobs import ARCHITECTURE, CHECKPOINT, CostModel, Kind, Pricing
from looplab.workers.reporter import MemoryReporter
from tests.db_rows import rows
from tests.orchestrator import fake_jobs

# Tables of the queue itself (written by jobqueue and the writer for every kind), not results of a kind.
QUEUE_TABLES = {
    "grids",
    "jobs",
    "job_deps",
    "attempts",
    "metrics",
    "latest_metrics",
    "job_logs",
    "health_events",
    "alert_outbox",
    "rewinds",
    "superseded_points",
    "audit",  # who did what (revision 0024): the queue's people, no kind's results
}


class ProbeKinds:
    """The fake kinds plus two declared only here: `probe` (about its train job's checkpoint, alone on
    its node, writes depth_evals rows) and `shape` (about the architecture only)."""

    KINDS = {
        **fake_jobs.KINDS,
        "probe": Kind(__name__, follows="train", about=CHECKPOINT, exclusive=True, tables=("depth_evals",)),
        "shape": Kind(__name__, follows="train", about=ARCHITECTURE, arch_keys=("recipe", "size")),
    }
    SPECS = {"probe": {"checkpoint": None, "n": 2}, "shape": {"recipe": None, "size": None}}

    def validate(self, kind, spec):
        if kind not in self.SPECS:
            return fake_jobs.validate(kind, spec)
        unknown = sorted(set(spec) - set(self.SPECS[kind]))
        if unknown:
            raise ConfigError(f"{kind}: unknown key(s) {unknown}")
        return {**self.SPECS[kind], **spec}

    def run(self, kind, spec, reporter, artifact_dir):
        if kind != "probe":
            return fake_jobs.run(kind, spec, reporter, artifact_dir)
        for loops in range(1, spec["n"] + 1):
            reporter.result("depth_evals", {"loops": loops, "val_loss": 1.0 / loops})
        return {"checkpoint": spec["checkpoint"]}


def test_a_kind_declared_only_in_its_registry_flows_through_grid_queue_launch_and_views(tmp_path):
    kinds = ProbeKinds()
    grid = Grid(
        "g",
        base={"tokens": 100, "recipe": "parcae"},
        sweep={"seed": [0, 1]},
        then=["probe", "shape"],
        follow={"probe": {"n": 3}},
        resources={"probe": {"num_cpus": 2}},
    )
    plans = expand([grid], kinds)
    assert [p.kind for p in plans] == ["train", "probe", "shape"] * 2
    probe, shape = plans[1], plans[2]
    assert probe.deps == [0] and probe.spec == {"n": 3}  # no checkpoint: the queue sets it at launch
    assert shape.deps == [] and shape.spec == {"recipe": "parcae", "size": "tiny"}  # the model keys only
    assert probe.resources == {"num_cpus": 2}  # `resources` recognised as a per-kind mapping
    with pytest.raises(ConfigError, match="then: unknown 'probe'; accepted: depth_sweep"):
        expand([grid], fake_jobs)  # the same grid with a registry that does not declare it

    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art", kinds=kinds)
    ids = q.submit(grid)
    assert len(set(ids)) == 5  # one architecture job for both seeds
    assert q.submit(grid) == ids and q.last_added == []  # idempotent
    train_id, probe_id = ids[0], ids[1]
    labels = dict(rows(q, "SELECT id, recipe || ' ' || seed || ' ' || variant_id FROM jobs"))
    assert labels[probe_id] == labels[train_id] and labels[train_id].startswith("parcae 0 ")  # as a sweep's
    assert rows(q, "SELECT depends_on FROM job_deps WHERE job_id = :i", i=probe_id) == [(train_id,)]

    with q.eng.connect() as conn:
        job = conn.execute(sa.select(jobqueue.JOBS).where(jobqueue.JOBS.c.id == probe_id)).one()
    res = jobkinds.job_resources("probe", job.resources, has_gpu=False, kinds=kinds)
    assert res == {
        "num_cpus": 2.0,
        "num_gpus": 0.0,
        "workers": 1,
        "exclusive": True,
    }  # alone by its declaration
    assert not jobkinds.job_resources("shape", None, has_gpu=False, kinds=kinds)["exclusive"]

    train_art = tmp_path / "art" / "train"
    assert jobqueue.claim(q.eng, train_id, "w", str(train_art)) == 1
    assert jobqueue.launch_spec(q.eng, job, kinds) == {"checkpoint": str(train_art), "n": 3}

    n = jobqueue.claim(q.eng, probe_id, "w", str(tmp_path / "art" / "probe"))
    reporter = MemoryReporter()
    kinds.run("probe", jobqueue.launch_spec(q.eng, job, kinds), reporter, tmp_path)
    write_events(q.eng, [(probe_id, n, reporter.events)])
    depth = q.results("depth").sort_values("loops")
    assert list(depth["loops"]) == [1, 2, 3] and set(depth["train_job_id"]) == {train_id}
    assert set(depth["recipe"]) == {"parcae"} and set(depth["seed"]) == {0}


def test_every_declared_result_table_exists_and_every_result_table_is_declared():
    declared = {t for kind in jobs.KINDS.values() for t in kind.tables}
    with_job_id = {t.name for t in Base.metadata.sorted_tables if "job_id" in t.c} | {"jobs"}
    assert declared == set(RESULT_TABLES) == with_job_id - QUEUE_TABLES
    assert all(RESULT_TABLES[t].__tablename__ == t for t in declared)


def test_every_view_is_declared_by_the_kind_whose_rows_it_shows():
    assert sorted(jobkinds.view_names()) == sorted(set(VIEW_NAMES) - set(QUEUE_VIEWS))
    assert jobkinds.writer_of("depth_evals") == "depth_sweep" and jobkinds.writer_of("task_scores") == "eval"
    with pytest.raises(KeyError, match="no job kind declares result table 'metrics'"):
        jobkinds.writer_of("metrics")


def test_the_built_in_declarations_say_what_the_old_lists_said():
    # the old lists' four kinds, the import kind, then the adaptive job (workers/adaptive/job.py): a checkpoint
    # follow-up that runs alone, since it times decoding
    assert jobkinds.follow_ups("train") == ("depth_sweep", "decode_bench", "eval", "adaptive")
    assert jobkinds.follow_ups("import") == ("depth_sweep", "decode_bench", "eval", "adaptive")  # a run too
    assert [k for k in jobs.KINDS if jobs.KINDS[k].about == CHECKPOINT] == ["depth_sweep", "eval", "adaptive"]
    assert [k for k in jobs.KINDS if jobs.KINDS[k].exclusive] == ["decode_bench", "adaptive"]
    assert [k for k in jobs.KINDS if jobs.KINDS[k].arch_keys] == ["train", "import", "decode_bench"]
    assert [k for k in jobs.KINDS if jobs.KINDS[k].identity_keys] == ["import"]
    assert jobs.KINDS["decode_bench"].arch_keys == ("recipe", "size", "model")


def test_the_declarations_say_how_each_kind_is_priced_whether_it_spans_workers_and_its_title():
    """What the planner, its report and the task runner ask of a kind, each read from the declarations:
    which kinds are priced how (by a module named as text, imported only to price a job), which may
    span several workers, and the name a person reads."""
    assert jobkinds.priced(Pricing.TRAINING) == ("train",)
    assert jobkinds.priced(Pricing.FORWARD) == ("decode_bench",)
    assert jobkinds.priced(Pricing.ON_CHECKPOINT) == ("depth_sweep", "eval")
    assert [k for k in jobs.KINDS if jobs.KINDS[k].cost is None] == ["import", "adaptive", "prepare"]
    assert [k for k in jobs.KINDS if (c := jobs.KINDS[k].cost) is not None and c.per_device] == [
        "decode_bench"
    ]
    for kind in ("train", "decode_bench", "depth_sweep", "eval"):  # each names its Spec and cost
        module = jobs.KINDS[kind].cost.load()
        assert callable(module.cost) and callable(module.Spec.from_dict), kind
    assert jobkinds.gangs() == ("train",) and jobkinds.gangs(fake_jobs) == ("train",)
    assert jobkinds.title("decode_bench") == "decode benchmark" and jobkinds.title("train") == "training"
    assert jobkinds.title("noop", fake_jobs) == "noop"  # undeclared title: its name
    assert all(kind.title for kind in jobs.KINDS.values())


def test_the_task_runner_refuses_a_gang_of_a_kind_not_declared_one_naming_the_gang_kinds():
    """The check runs before anything is sent to Ray; a registry that declares another gang kind
    has it accepted and named."""
    from looplab.orchestrator.admission import Request
    from looplab.orchestrator.task import launch

    class Sharded:
        KINDS = {**fake_jobs.KINDS, "shard": Kind(__name__, gang=True)}

    gang = Request(1.0, 0.0, 2, False)
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "resources.workers: 2: only train, shard jobs run on several workers, not noop; accepted: 1"
        ),
    ):
        launch(1, "noop", {}, "art", None, Sharded(), gang)

    class Single:
        KINDS = {k: Kind(__name__) for k in ("train", "noop")}

    with pytest.raises(ConfigError, match="resources.workers: 2: no kind runs on several workers, not train"):
        launch(1, "train", {}, "art", None, Single(), gang)


@pytest.mark.parametrize(
    "declaration,message",
    [
        (dict(follows="train"), "follows and about: give both or neither"),
        (
            dict(follows="train", about="weights"),
            "about: unknown 'weights'; accepted: checkpoint, architecture",
        ),
        (dict(follows="train", about=ARCHITECTURE), "arch_keys: an architecture follow-up needs"),
        (
            dict(cost=CostModel("looplab.workers.evaluate.eval", Pricing.ON_CHECKPOINT)),
            "cost: pricing on_checkpoint prices a job on the checkpoint it follows: give it about 'checkpoint'",
        ),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_field(declaration, message):
    with pytest.raises(ConfigError, match=message):
        Kind("workers.x", **declaration)


def test_a_registry_without_declarations_gets_the_built_in_ones_else_a_plain_kind(monkeypatch):
    class Bare:
        def validate(self, kind, spec):
            return dict(spec)

        def run(self, kind, spec, reporter, artifact_dir):
            return {}

    assert jobkinds.declared("decode_bench", Bare()) == jobs.KINDS["decode_bench"]
    assert jobkinds.declared("noop", Bare()) == jobkinds.PLAIN
    assert jobkinds.declared("noop", fake_jobs).module == fake_jobs.__name__
    assert jobkinds.declared("depth_sweep", fake_jobs).about == CHECKPOINT  # a double of the real kind
    monkeypatch.setenv(jobkinds.REGISTRY_ENV, "tests.orchestrator.fake_jobs")
    assert jobkinds.registry() is fake_jobs and jobkinds.declared("boom").module == fake_jobs.__name__
    monkeypatch.delenv(jobkinds.REGISTRY_ENV)
    assert jobkinds.registry() is jobs


# ---------------------------------------------------------------- iso-time pairing


def test_a_match_time_budget_is_recognised_as_given_planned_and_stored():
    assert pairing.is_match_time({"match_time_of": {"recipe": "lean"}})  # as a grid gives it
    assert pairing.is_match_time('{"match_time_of":3}')  # as a job stores it
    assert not pairing.is_match_time({"tokens": 5}) and not pairing.is_match_time(None)
    assert pairing.stored_reference('{"match_time_of":3}') == 3 and pairing.stored(3) == {"match_time_of": 3}
    assert pairing.stored_reference('{"match_time_of":true}') is None
    assert pairing.stored_reference('{"tokens":5}') is None and pairing.stored_reference(None) is None


def test_pair_members_and_references_of_a_submission():
    ref = Grid("ref", base={"tokens": 100, "recipe": "lean"}, sweep={"seed": [0, 1]}, then=["depth_sweep"])
    iso = Grid("iso", base={"recipe": "parcae", "budget": {"match_time_of": {"recipe": "lean", "seed": 1}}})
    by_id = Grid("by-id", base={"recipe": "plain", "budget": {"match_time_of": 7}})
    plans = expand([ref, iso, by_id], fake_jobs)
    assert [p.kind for p in plans] == ["train", "depth_sweep", "train", "depth_sweep", "train", "train"]
    assert pairing.reference(plans[4]) == pairing.Reference(plan=2)  # lean seed 1
    assert pairing.reference(plans[5]) == pairing.Reference(job=7)
    assert pairing.reference(plans[0]) is None and pairing.reference(plans[1]) is None
    assert pairing.members(plans) == {2, 4, 5} and pairing.existing_references(plans) == [7]
    assert pairing.reference_id(plans[4], {2: 12}) == 12 and pairing.reference_id(plans[5], {}) == 7
    assert pairing.member_ids(plans, {2: 12, 4: 14, 5: 15}) == [7, 12, 14, 15]


@pytest.mark.parametrize(
    "ref,message",
    [
        (True, "is neither a job id nor a dict"),
        ({"recipe": "lean"}, "matches 0 train jobs of this submission (need exactly one)"),
    ],
)
def test_a_bad_reference_is_refused_naming_the_grid(ref, message):
    with pytest.raises(ConfigError, match=re.escape(f"grid 'iso': budget.match_time_of: {ref!r} {message}")):
        expand([Grid("iso", base={"recipe": "parcae", "budget": {"match_time_of": ref}})], fake_jobs)


def test_the_stored_jobs_that_copy_a_time(tmp_path):
    q = Queue(db=tmp_path / "q.db", kinds=fake_jobs)
    (ref,) = q.submit(Grid("ref", base={"tokens": 100}))
    (a,) = q.submit(Grid("a", base={"recipe": "parcae", "budget": {"match_time_of": ref}}))
    (b,) = q.submit(Grid("b", base={"recipe": "plain", "budget": {"match_time_of": ref}}))
    (other,) = q.submit(Grid("c", base={"recipe": "fixed4", "budget": {"match_time_of": a}}))
    with q.eng.connect() as conn:
        assert pairing.matched_to(conn, ref) == [a, b] and pairing.matched_to(conn, a) == [other]
        assert pairing.matched_to(conn, b) == []
    stored = dict(rows(q, "SELECT id, budget FROM jobs"))
    assert [pairing.stored_reference(stored[j]) for j in (ref, a, b, other)] == [None, ref, ref, a]
    assert all(json.loads(r) == {"exclusive": True} for (r,) in rows(q, "SELECT resources FROM jobs"))
