"""The looplab model inside lm-evaluation-harness: a local task run through `simple_evaluate` scores what
the log-likelihoods computed independently give, by LM object and by the registered name "looplab";
the eval job runs a harness task from a task folder and gets the same rows as its own scoring."""

from __future__ import annotations

import pytest
import torch

from looplab.workers.data.tokenizer import Tokenizer
from looplab.workers.evaluate import eval as eval_job
from looplab.workers.inputs import EVAL_H0_SEED
from looplab.workers.reporter import MemoryReporter
from looplab.workers.tasks.likelihood import LoopedScorer
from tests.workers.test_eval import ITEMS, assert_rows_match, independent_rows, write_checkpoint, write_items

lm_eval = pytest.importorskip("lm_eval", reason="lm-evaluation-harness is the `eval` extra")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("harness")
    model = write_checkpoint(root / "ckpt")
    task = write_items(root / "mini.jsonl")
    return root, model, task


def _harness_acc(results: dict, task: str) -> tuple[float, float]:
    metrics = results["results"][task]
    return metrics["acc,none"], metrics["acc_norm,none"]


def test_simple_evaluate_with_a_local_task_matches_independent_loglikelihoods(setup):
    from lm_eval.tasks import TaskManager

    from looplab.workers.evaluate.lm_eval_adapter import LooplabLM, local_task_config

    root, model, task = setup
    manager = TaskManager(include_defaults=False)
    scorer = LoopedScorer(
        model, Tokenizer(), loops=3, h0_seed=EVAL_H0_SEED, batch_size=4, device=torch.device("cpu")
    )
    expected = independent_rows(model, ITEMS, 3)["all"]
    by_object = lm_eval.simple_evaluate(
        model=LooplabLM.from_scorer(scorer),
        tasks=[local_task_config("mini", task)],
        task_manager=manager,
        bootstrap_iters=0,
    )
    assert _harness_acc(by_object, "mini") == (expected["acc"], expected["acc_norm"])
    by_name = lm_eval.simple_evaluate(
        model="looplab",
        model_args=f"checkpoint={root / 'ckpt'},loops=3,device=cpu,batch_size=2",
        tasks=[local_task_config("mini", task)],
        task_manager=manager,
        bootstrap_iters=0,
    )
    assert _harness_acc(by_name, "mini") == (expected["acc"], expected["acc_norm"])


def test_the_adapter_refuses_generation_and_needs_a_checkpoint():
    from looplab.workers.evaluate.lm_eval_adapter import LooplabLM

    scorer = LoopedScorer(
        write_checkpoint_model(), Tokenizer(), loops=1, h0_seed=0, batch_size=1, device=torch.device("cpu")
    )
    with pytest.raises(NotImplementedError, match="generate_until is not supported"):
        LooplabLM.from_scorer(scorer).generate_until([])
    with pytest.raises(ValueError, match="checkpoint="):
        LooplabLM()
    from lm_eval.api.registry import get_model

    assert (
        get_model("looplab") is LooplabLM and get_model("dummy") is not None
    )  # the harness's own still listed


def write_checkpoint_model():
    from looplab.families.looped.model import LoopedLM
    from looplab.model.presets import preset

    return LoopedLM(
        preset("fixed4", "tiny", d_model=32, n_heads=1, head_dim=32, seq_len=32, vocab_size=256)
    ).eval()


def test_the_job_scores_a_harness_task_like_its_own(setup, tmp_path):
    root, model, task = setup
    include = tmp_path / "harness_tasks"
    include.mkdir()
    (include / "mini_harness.yaml").write_text(
        f"task: mini_harness\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {task}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: context\ndoc_to_choice: choices\n"
        "doc_to_target: gold\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\nmetadata:\n  version: 1.0\n"
    )
    spec = eval_job.Spec.from_dict(
        {
            "checkpoint": str(root / "ckpt"),
            "tasks": [str(task), "harness:mini_harness"],
            "loops": [2],
            "harness_include": str(include),
            "categories": {"mini_harness": "knowledge"},
            "device": "cpu",
        }
    )
    rep = MemoryReporter()
    out = eval_job.run(spec, rep, tmp_path / "art")
    own = [r for r in out["task_scores"] if r["task"] == "mini"]
    harness = [r for r in out["task_scores"] if r["task"] == "mini_harness"]
    expected = independent_rows(model, ITEMS, 2)
    assert_rows_match(own, expected)
    assert_rows_match(harness, expected)  # per subset too: from the harness's per-document samples
    assert {r["category"] for r in harness} == {"knowledge"}
    # resumable like local tasks: a second run scores nothing and reports the same rows
    again = eval_job.run(spec, MemoryReporter(), tmp_path / "art")
    assert again["task_scores"] == out["task_scores"]
