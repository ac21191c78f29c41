"""A looplab checkpoint as an lm-evaluation-harness model: `lm_eval --model looplab`.

Importing this module registers `LooplabLM` with the harness under the name "looplab", so any of its
multiple-choice, cloze and perplexity tasks (SciQ, ARC, PIQA, HellaSwag, LAMBADA, ...) runs against a
looplab checkpoint when the task's data is available (the hub when online, the HF cache or local files
otherwise):

    import looplab.workers.evaluate.lm_eval_adapter, lm_eval
    lm_eval.simple_evaluate(model="looplab", model_args="checkpoint=runs/x,loops=8", tasks=["sciq"])

Model arguments: `checkpoint` (a train or import artifact dir, a checkpoint file, or a model directory
that `looplab export-model` wrote), `loops` (inference loop count; default the model's own), `h0_seed`
(default training's evaluation seed), `batch_size`, `device`. A CUDA device that this machine does not
have (the harness's default is `cuda:0`) falls back to the CPU, as the harness's own HF model does.

From the shell: `looplab lm-eval --model looplab --model_args checkpoint=DIR --tasks sciq` (the
harness's own command line, with this module imported first).
Scoring is `workers.tasks.likelihood.LoopedScorer` (tokenization, truncation and determinism are
documented there); generation is not supported.

`local_task_config` turns a task file of the looplab schema (workers/tasks/schema.py) into a harness
task config, and `harness_rows` runs harness tasks and reports them as the eval job's score rows.
The harness is the optional extra `pip install -e .[eval]`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lm_eval.models  # noqa: F401 - the harness lists its own models only while our registry is empty
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from looplab.model import fields
from looplab.workers.inputs import EVAL_H0_SEED
from looplab.workers.tasks.likelihood import LoopedScorer, load_checkpoint
from looplab.workers.tasks.scoring import Outcome, subset_rows

MODEL_NAME = "looplab"
log = logging.getLogger("looplab.lm_eval")


def harness_device(name: str | None):
    """The torch device for a `device` the harness passes: `auto`/None as the jobs resolve it; a CUDA
    device this machine lacks (no CUDA, or no such index) falls back to cuda if there is one, else the
    CPU, as the harness's HFLM falls back ("Device not specified")."""
    import torch

    from looplab.workers.device import resolve_device

    name = fields.device("device", name or "auto")
    if name.startswith("cuda"):
        index = int(name.partition(":")[2] or 0)
        if not torch.cuda.is_available() or index >= torch.cuda.device_count():
            fallback = "cuda" if torch.cuda.is_available() else "cpu"
            log.warning("looplab: device %r is not available here; using %s", name, fallback)
            return torch.device(fallback)
    return resolve_device(name)


def _int_arg(name: str, value: Any, lo: int) -> int:
    """An integer model argument; the harness CLI passes numbers as text sometimes ("8")."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    return fields.integer(name, value, lo=lo)


@register_model(MODEL_NAME)
class LooplabLM(LM):
    """A looped LM checkpoint at one inference loop count and h0 seed (see the module docstring)."""

    def __init__(
        self,
        checkpoint: str | None = None,
        loops: int | str | None = None,
        h0_seed: int | str = EVAL_H0_SEED,
        batch_size: int | str | None = 16,
        device: str | None = "auto",
        scorer: LoopedScorer | None = None,
        **harness_kwargs: Any,  # max_batch_size and others the harness passes to every model
    ) -> None:
        super().__init__()
        if scorer is None:
            if not checkpoint:
                raise ValueError(
                    "looplab: model_args needs checkpoint=<train artifact dir or checkpoint file>"
                )
            torch_device = harness_device(device)
            model, tokenizer = load_checkpoint(checkpoint, torch_device)
            if batch_size in (None, "auto") or str(batch_size).startswith("auto"):
                batch_size = 16
            scorer = LoopedScorer(
                model,
                tokenizer,
                loops=model.cfg.loops if loops is None else _int_arg("loops", loops, lo=1),
                h0_seed=_int_arg("h0_seed", h0_seed, lo=0),
                batch_size=_int_arg("batch_size", batch_size, lo=1),
                device=torch_device,
            )
        self.scorer = scorer
        self._device = scorer.device

    @classmethod
    def from_scorer(cls, scorer: LoopedScorer) -> LooplabLM:
        return cls(scorer=scorer)

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        pairs = [tuple(r.args) for r in requests]
        results = self.scorer.loglikelihood(pairs)
        for pair, result in zip(pairs, results):
            self.cache_hook.add_partial("loglikelihood", pair, result)
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        texts = [r.args[0] for r in requests]
        results = self.scorer.loglikelihood_rolling(texts)
        for text, result in zip(texts, results):
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), result)
        return results

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        raise NotImplementedError(
            "looplab: generate_until is not supported (generation tasks need a decoding loop per loop "
            "count); run multiple-choice, cloze or perplexity tasks"
        )


def local_task_config(name: str, path: str | Path) -> dict[str, Any]:
    """A harness task config (as a dict, what a YAML task file holds) over a task file of the looplab
    schema: multiple choice, every choice scored after the context with the default " " delimiter,
    acc and acc_norm."""
    return {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(Path(path).resolve())}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "context",  # a field name: the text is used as it is, not as a template
        "doc_to_choice": "choices",
        "doc_to_target": "gold",
        "metric_list": [
            {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
            {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
        ],
        "metadata": {"version": 1.0},
    }


def task_manager(include_path: str | Path | None, names: list[str]):
    """A TaskManager that knows `names`: the include folder alone when it has them all (indexing the
    harness's own thousands of tasks takes seconds), else the harness's tasks too."""
    from lm_eval.tasks import TaskManager

    if include_path is not None:
        own = TaskManager(include_path=str(include_path), include_defaults=False)
        if all(name in own.all_tasks for name in names):
            return own
    manager = TaskManager(include_path=None if include_path is None else str(include_path))
    missing = [name for name in names if name not in manager.all_tasks]
    if missing:
        raise ValueError(f"tasks: harness:{missing[0]}: no such lm-evaluation-harness task or group")
    return manager


def _subset(doc: Any) -> str | None:
    subset = doc.get("subset") if isinstance(doc, dict) else None
    return None if subset is None or subset == "" else str(subset)


def harness_rows(
    lm: LooplabLM, tasks: list[str | dict[str, Any]], manager, limit: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Run harness tasks (names or config dicts) with `lm`; {task: score rows} with a row per subset
    (a document's `subset` field, when it has one) and one for the whole task, as `scoring.subset_rows`
    gives them. acc_norm is None for a task without it, the chance level None unless multiple choice."""
    import lm_eval

    out = lm_eval.simple_evaluate(
        model=lm, tasks=tasks, task_manager=manager, log_samples=True, bootstrap_iters=0, limit=limit
    )
    rows: dict[str, list[dict[str, Any]]] = {}
    for task, samples in out["samples"].items():
        multiple_choice = out["configs"][task].get("output_type") == "multiple_choice"
        if not samples or "acc" not in samples[0]:
            continue  # a task without accuracy (perplexity only): nothing for the task table
        scored = [
            Outcome(
                acc=float(s["acc"]),
                acc_norm=float(s.get("acc_norm", s["acc"])),
                n_choices=len(s["arguments"]) if multiple_choice else 1,
                subset=_subset(s["doc"]),
            )
            for s in sorted(samples, key=lambda s: s["doc_id"])
        ]
        has_norm = "acc_norm" in samples[0]
        task_rows = subset_rows(scored)
        for row in task_rows:
            row["acc_norm"] = row["acc_norm"] if has_norm else None
            row["chance"] = row["chance"] if multiple_choice else None
        rows[task] = task_rows
    return rows
