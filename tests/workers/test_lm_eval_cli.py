"""`looplab lm-eval` from the shell: the harness's own command line with the looplab model registered,
run in a subprocess on the CPU with the harness's default device (cuda:0, which falls back to the CPU
as the harness's HF model falls back), scoring a local task (a YAML over a JSON-lines file) of a model
directory that `looplab export-model` wrote. The scores equal the independently computed ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.workers.test_eval import ITEMS, independent_rows, write_checkpoint, write_items

pytest.importorskip("lm_eval", reason="lm-evaluation-harness is the `eval` extra")
ROOT = Path(__file__).parents[2]


def _looplab(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "looplab", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_looplab_lm_eval_runs_a_local_task_from_the_shell_on_the_cpu(tmp_path):
    from looplab.workers.evaluate.lm_eval_adapter import local_task_config

    model = write_checkpoint(tmp_path / "ckpt")
    exported = _looplab("export-model", str(tmp_path / "ckpt"), "-o", str(tmp_path / "model"), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert json.loads((tmp_path / "model" / "config.json").read_text())["tokenizer"] == "byte"
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    config = local_task_config("mini", write_items(tmp_path / "mini.jsonl"))
    (tasks / "mini.yaml").write_text(yaml.safe_dump(config))

    out = _looplab(
        "lm-eval",
        "--model",
        "looplab",
        "--model_args",
        f"checkpoint={tmp_path / 'model'},loops=3",
        "--tasks",
        "mini",
        "--include_path",
        str(tasks),
        "--output_path",
        str(tmp_path / "results"),
        "--batch_size",
        "2",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "device 'cuda:0' is not available here; using cpu" in out.stderr  # the harness's default device
    (results,) = (tmp_path / "results").rglob("results_*.json")
    metrics = json.loads(results.read_text())["results"]["mini"]
    with torch.no_grad():
        expected = independent_rows(model, ITEMS, 3)["all"]
    assert (metrics["acc,none"], metrics["acc_norm,none"]) == (expected["acc"], expected["acc_norm"])

    bad = _looplab(
        "lm-eval",
        "--model",
        "looplab",
        "--model_args",
        f"checkpoint={tmp_path / 'nothing'}",
        "--tasks",
        "mini",
        "--include_path",
        str(tasks),
        cwd=tmp_path,
    )
    assert bad.returncode != 0 and "nothing" in bad.stderr
