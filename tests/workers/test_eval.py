"""The eval job on a tiny random checkpoint: scores equal to log-likelihoods computed independently here,
independent of batching, resumable after a stop, bad specs and task files refused, the CLI."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from looplab.model.errors import ConfigError
from looplab.workers import jobs
from looplab.workers.evaluate import eval as eval_job
from looplab.workers.inputs import EVAL_H0_SEED
from looplab.workers.reporter import JobInterrupted, MemoryReporter
from looplab.workers.tasks.likelihood import LoopedScorer

SEQ_LEN = 96
ITEMS = [
    {
        "context": "Anne is red. If something is red then it is big.\nQuestion: Anne is big?\nAnswer:",
        "choices": ["true", "false", "unknown"],
        "gold": 0,
        "subset": "depth=1",
    },
    {
        "context": "The cat is not cold.\nQuestion: The cat is cold?\nAnswer:",
        "choices": ["true", "false", "unknown"],
        "gold": 1,
        "subset": "depth=0",
    },
    {
        "context": "Mary's son is Tom.\nQuestion: How is Mary related to Tom?\nAnswer: Mary is Tom's",
        "choices": ["mother", "aunt", "sister", "wife"],
        "gold": 0,
        "subset": "depth=1",
    },
    {
        "context": "x" * 150 + " The last words matter:",
        "choices": ["yes", "no"],
        "gold": 1,
        "subset": "depth=0",
    },
    {"context": "Trailing space ", "choices": ["a", "bb", "ccc"], "gold": 2},
]


def write_checkpoint(directory, seed: int = 0):
    """A random-weight fixed4 model (byte vocabulary) saved the way a train job saves one."""
    from looplab.families.looped.model import LoopedLM
    from looplab.model.presets import preset
    from looplab.workers import checkpoint as ckpt

    torch.manual_seed(seed)
    cfg = preset("fixed4", "tiny", d_model=32, n_heads=1, head_dim=32, seq_len=SEQ_LEN, vocab_size=256)
    model = LoopedLM(cfg)
    directory.mkdir(parents=True, exist_ok=True)
    state = {
        "model": model.state_dict(),
        "model_config": cfg.to_dict(),
        "spec": {"data": {"tokenizer": "byte"}},
    }
    ckpt.save(directory / ckpt.FINAL, state)
    return model.eval()


def write_items(path, items=ITEMS):
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("eval_ckpt")
    return directory, write_checkpoint(directory)


@torch.no_grad()
def independent_loglikelihood(model, context: str, continuation: str, loops: int) -> float:
    """One sequence, one forward, no batching or padding: bytes of "\\n\\n" + context + continuation (the
    context's trailing spaces moved to the continuation), the last seq_len + 1 kept."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    ids = list(("\n\n" + context + continuation).encode())[-(SEQ_LEN + 1) :]
    n_cont = len(continuation.encode())
    logprobs = model(torch.tensor([ids[:-1]]), loops=loops, h0_seed=EVAL_H0_SEED).logits[0].log_softmax(-1)
    targets = torch.tensor(ids[-n_cont:])
    return float(logprobs[-n_cont:].gather(-1, targets[:, None]).sum())


def independent_rows(model, items: list[dict], loops: int) -> dict[str, dict]:
    """{subset: {n, acc, acc_norm, stderr, chance}} computed from scratch (the harness's definitions)."""
    per_item = []
    for item in items:
        lls = [independent_loglikelihood(model, item["context"], " " + c, loops) for c in item["choices"]]
        norm = [ll / len(c) for ll, c in zip(lls, item["choices"])]
        per_item.append(
            (
                item.get("subset"),
                float(lls.index(max(lls)) == item["gold"]),
                float(norm.index(max(norm)) == item["gold"]),
                1 / len(item["choices"]),
            )
        )
    out = {}
    for subset in ["all", *dict.fromkeys(s for s, *_ in per_item if s is not None)]:
        group = [p for p in per_item if subset == "all" or p[0] == subset]
        accs = [p[1] for p in group]
        mean = sum(accs) / len(accs)
        var = sum((a - mean) ** 2 for a in accs) / (len(accs) - 1) if len(accs) > 1 else None
        out[subset] = {
            "n": len(group),
            "acc": mean,
            "acc_norm": sum(p[2] for p in group) / len(group),
            "stderr": None if var is None else math.sqrt(var / len(accs)),
            "chance": sum(p[3] for p in group) / len(group),
        }
    return out


def assert_rows_match(rows: list[dict], expected: dict[str, dict]) -> None:
    assert {r["subset"] for r in rows} == set(expected)
    for row in rows:
        want = expected[row["subset"]]
        assert (row["n"], row["acc"], row["acc_norm"]) == (want["n"], want["acc"], want["acc_norm"]), row
        assert row["chance"] == pytest.approx(want["chance"])
        assert (
            row["stderr"] == pytest.approx(want["stderr"])
            if want["stderr"] is not None
            else row["stderr"] is None
        )


def test_scores_equal_independently_computed_loglikelihoods(checkpoint, tmp_path):
    ckpt_dir, model = checkpoint
    task = write_items(tmp_path / "mini.jsonl")
    spec = eval_job.Spec.from_dict(
        {"checkpoint": str(ckpt_dir), "tasks": [str(task)], "loops": [1, 3], "batch_size": 3, "device": "cpu"}
    )
    rep = MemoryReporter()
    out = eval_job.run(spec, rep, tmp_path / "art")
    reported = [r["row"] for r in rep.of("result") if r["table"] == "task_scores"]
    assert reported == out["task_scores"] and len(reported) == 2 * 3  # 2 loop counts x (all + 2 subsets)
    for loops in (1, 3):
        rows = [r for r in reported if r["loops"] == loops]
        assert {r["task"] for r in rows} == {"mini"} and {r["category"] for r in rows} == {None}
        assert_rows_match(rows, independent_rows(model, ITEMS, loops))
    assert rep.of("progress")[-1] == {"done": 2.0, "total": 2.0, "eta_s": None}


def test_a_request_scores_the_same_in_any_batch(checkpoint):
    _, model = checkpoint
    from looplab.workers.data.tokenizer import Tokenizer

    pairs = [(i["context"], " " + c) for i in ITEMS for c in i["choices"]]
    expected = [independent_loglikelihood(model, c, x, 2) for c, x in pairs]
    for batch_size in (1, 4, len(pairs)):
        scorer = LoopedScorer(
            model,
            Tokenizer(),
            loops=2,
            h0_seed=EVAL_H0_SEED,
            batch_size=batch_size,
            device=torch.device("cpu"),
        )
        got = [ll for ll, _ in scorer.loglikelihood(pairs)]
        assert got == pytest.approx(expected, abs=1e-4)


def test_rolling_loglikelihood_predicts_every_token_once(checkpoint):
    _, model = checkpoint
    from looplab.workers.data.tokenizer import Tokenizer

    scorer = LoopedScorer(
        model, Tokenizer(), loops=1, h0_seed=EVAL_H0_SEED, batch_size=4, device=torch.device("cpu")
    )
    text = "A longer text than one window of the model. " * 6  # 264 bytes: windows of 96, 96 and 72
    windows = scorer.rolling_requests(text)
    assert [len(cont) for _, cont in windows] == [96, 96, 72]
    assert sum((cont for _, cont in windows), []) == list(text.encode())
    expected = sum(_window_ll(model, text, at) for at in range(0, len(text), 96))
    assert scorer.loglikelihood_rolling([text])[0] == pytest.approx(expected, abs=1e-3)


@torch.no_grad()
def _window_ll(model, text: str, at: int) -> float:
    """The log-likelihood of text[at : at + 96] after everything before it (the separator first), the
    model seeing at most its last seq_len tokens."""
    ids = list(("\n\n" + text).encode())
    start = 2 + at
    cont = ids[start : start + 96]
    whole = ids[: start + len(cont)][-(SEQ_LEN + 1) :]
    logprobs = model(torch.tensor([whole[:-1]]), loops=1, h0_seed=EVAL_H0_SEED).logits[0].log_softmax(-1)
    return float(logprobs[-len(cont) :].gather(-1, torch.tensor(cont)[:, None]).sum())


class StopAfter(MemoryReporter):
    """Asks the job to stop once it reported `n` result rows (a Ctrl-C or a cancel between results)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def should_stop(self) -> bool:
        return len(self.of("result")) >= self.n


def test_a_stopped_eval_continues_where_it_stopped(checkpoint, tmp_path, monkeypatch):
    ckpt_dir, _ = checkpoint
    spec = eval_job.Spec.from_dict(
        {
            "checkpoint": str(ckpt_dir),
            "tasks": ["deduction", "kinship"],
            "loops": [1, 2],
            "n_per_subset": 2,
            "device": "cpu",
        }
    )
    scored: list[int] = []
    real = LoopedScorer.score_tokens

    def counting(self, requests, on_batch=None):
        scored.append(self.loops)
        return real(self, requests, on_batch)

    monkeypatch.setattr(LoopedScorer, "score_tokens", counting)
    with pytest.raises(JobInterrupted):
        eval_job.run(spec, StopAfter(1), tmp_path)  # stops after deduction @ 1 loop
    assert scored == [1]
    assert sorted(p.name for p in (tmp_path / "scores").iterdir()) == ["deduction@1.json"]
    rep = MemoryReporter()
    out = eval_job.run(spec, rep, tmp_path)
    assert scored == [1, 2, 1, 2]  # the three results not stored yet, nothing twice
    assert [(r["task"], r["loops"]) for r in out["task_scores"] if r["subset"] == "all"] == [
        ("deduction", 1),
        ("deduction", 2),
        ("kinship", 1),
        ("kinship", 2),
    ]
    again = eval_job.run(spec, MemoryReporter(), tmp_path)
    assert scored == [1, 2, 1, 2] and again["task_scores"] == out["task_scores"]  # all stored: reported again
    (tmp_path / "scores" / "kinship@2.json").write_text("{torn")  # a result file cut short is redone
    eval_job.run(spec, MemoryReporter(), tmp_path)
    assert scored == [1, 2, 1, 2, 2]
    assert (tmp_path / "tasks" / "deduction.jsonl").is_file() and (
        tmp_path / "tasks" / "kinship.jsonl"
    ).is_file()


def test_a_stored_result_of_another_checkpoint_is_not_reused(tmp_path):
    first = tmp_path / "a"
    write_checkpoint(first, seed=0)
    task = write_items(tmp_path / "mini.jsonl", ITEMS[:2])
    spec = eval_job.Spec.from_dict(
        {"checkpoint": str(first), "tasks": [str(task)], "loops": [1], "device": "cpu"}
    )
    eval_job.run(spec, MemoryReporter(), tmp_path / "art")
    stored = json.loads((tmp_path / "art" / "scores" / "mini@1.json").read_text())["key"]
    write_checkpoint(first, seed=1)  # retrained: a new file
    eval_job.run(spec, MemoryReporter(), tmp_path / "art")
    assert json.loads((tmp_path / "art" / "scores" / "mini@1.json").read_text())["key"] != stored


def test_spec_defaults_and_bad_values_name_the_field(tmp_path):
    d = jobs.validate("eval", {})
    assert d["tasks"] == ["deduction", "kinship"] and d["loops"] == [1, 2, 4, 8] and d["checkpoint"] is None
    assert eval_job.Spec.from_dict(d).to_dict() == d
    bad_file = write_items(tmp_path / "bad.jsonl", [ITEMS[0], {**ITEMS[1], "choices": ["only"]}])
    twin = tmp_path / "x" / "deduction.jsonl"
    twin.parent.mkdir()
    write_items(twin, ITEMS[:1])
    for bad, message in [
        ({"tasks": []}, "tasks: expected a non-empty list"),
        ({"tasks": ["nope"]}, "tasks: unknown 'nope'; accepted: deduction, kinship, a path to a .jsonl"),
        ({"tasks": ["harness:"]}, "tasks: 'harness:' names no harness task"),
        ({"tasks": [str(tmp_path / "missing.jsonl")]}, "is not a file"),
        ({"tasks": [str(bad_file)]}, f"{bad_file}:2: choices: expected a list of at least 2"),
        ({"tasks": ["deduction", str(twin)]}, "tasks: two tasks named 'deduction'"),
        ({"loops": [0]}, "loops"),
        ({"n_per_subset": 0}, "n_per_subset"),
        ({"limit": 0}, "limit"),
        (
            {"categories": {"deduction": "maths"}},
            "categories.deduction: unknown 'maths'; accepted: knowledge",
        ),
        ({"harness_include": str(tmp_path / "nowhere")}, "harness_include: expected an existing folder"),
        ({"device": "tpu"}, "device"),
        ({"task": ["deduction"]}, "unknown key 'task'"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            jobs.validate("eval", bad)


def test_limit_scores_the_first_items_and_categories_label_rows(checkpoint, tmp_path):
    ckpt_dir, model = checkpoint
    task = write_items(tmp_path / "mini.jsonl")
    spec = eval_job.Spec.from_dict(
        {
            "checkpoint": str(ckpt_dir),
            "tasks": [str(task)],
            "loops": [2],
            "limit": 2,
            "categories": {"mini": "knowledge"},
            "device": "cpu",
        }
    )
    out = eval_job.run(spec, MemoryReporter(), tmp_path / "art")
    assert {r["category"] for r in out["task_scores"]} == {"knowledge"}
    assert_rows_match(out["task_scores"], independent_rows(model, ITEMS[:2], 2))


def test_cli_prints_the_scores_and_refuses_a_bad_file(checkpoint, tmp_path, capsys):
    ckpt_dir, _ = checkpoint
    task = write_items(tmp_path / "mini.jsonl", ITEMS[:2])
    code = eval_job.main(
        [
            "--checkpoint",
            str(ckpt_dir),
            "--tasks",
            str(task),
            "--loops",
            "1,2",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0 and "mini" in printed and "depth=0" in printed
    assert (tmp_path / "out" / "scores" / "mini@2.json").is_file()
    bad = write_items(tmp_path / "bad.jsonl", [{**ITEMS[0], "gold": 7}])
    assert eval_job.main(["--checkpoint", str(ckpt_dir), "--tasks", str(bad)]) == 2
    assert f"{bad}:1: gold: 7 is out of range for 3 choices" in capsys.readouterr().err
