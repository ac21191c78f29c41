"""The Reporter protocol: one method per event kind, implemented by every reporter, and the kinds as
one string enum that survives a JSON line (the record of a standalone run) as its plain value."""

from __future__ import annotations

import io
import json

from looplab.workers.reporter import (
    BaseReporter,
    ConsoleReporter,
    EventKind,
    JsonlReporter,
    MemoryReporter,
    Reporter,
)

PROTOCOL = {name for name in vars(Reporter) if not name.startswith("_")}


def report_one_of_each(rep: BaseReporter) -> None:
    rep.started("node:42", "0,1")
    rep.resumed(3)
    rep.rewound(3, 4, [17, 18], 1)
    rep.metric("train_loss", 4, 1.5, tokens=64, wall_s=0.25)
    rep.progress(4, 10, eta_s=2.0)
    rep.checkpoint("/ckpt", 4)
    rep.log("hello", level="WARNING")
    rep.result("depth_evals", {"loops": 2, "val_loss": 2.5})
    rep.heartbeat()


def test_every_event_kind_is_made_by_one_reporter_method():
    rep = MemoryReporter()
    report_one_of_each(rep)
    assert [e.kind for e in rep.events] == [
        EventKind.STARTED,
        EventKind.RESUMED,
        EventKind.REWOUND,
        EventKind.METRIC,
        EventKind.PROGRESS,
        EventKind.CHECKPOINT,
        EventKind.LOG,
        EventKind.RESULT,
        EventKind.HEARTBEAT,
    ]
    assert {e.kind for e in rep.events} == set(EventKind)
    assert rep.of("started") == [{"worker": "node:42", "gpu_ids": "0,1"}]
    assert rep.of(EventKind.METRIC) == [
        {"key": "train_loss", "step": 4, "value": 1.5, "tokens": 64, "wall_s": 0.25}
    ]
    # the protocol names every method a job may call, and the base reporter implements each of them
    assert {kind.value for kind in EventKind} <= PROTOCOL
    assert all(callable(getattr(BaseReporter, name, None)) for name in PROTOCOL)


def test_a_json_line_keeps_the_plain_kind_and_reads_back_as_its_member(tmp_path):
    path = tmp_path / "events.jsonl"
    inner = MemoryReporter()
    rep = JsonlReporter(path, inner)
    report_one_of_each(rep)
    rep.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["kind"] for line in lines] == [e.kind.value for e in inner.events]
    assert [EventKind(line["kind"]) for line in lines] == [e.kind for e in inner.events]
    assert lines[0] == {"kind": "started", "ts": inner.events[0].ts, "worker": "node:42", "gpu_ids": "0,1"}


def test_the_console_says_where_a_run_started_and_what_it_logged():
    out = io.StringIO()
    rep = ConsoleReporter("job", stream=out)
    rep.started("node:42", None)
    rep.log("hello")
    rep.metric("train_loss", 1, 2.0)  # kept for the progress bar, not printed
    rep.close()
    assert out.getvalue().splitlines() == ["started: {'worker': 'node:42', 'gpu_ids': None}", "hello"]
