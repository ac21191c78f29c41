"""The GPU tests: everything benchmarks/gpu_check.sh collects, and nothing else.

Each file here imports only torch, pytest and our own model/workers code (and CPU-side helpers of
tests/model and tests/workers, which import nothing more), so collecting this folder works on a GPU
box that has PyTorch but no Ray, SQLAlchemy, Streamlit or datasets; tests/gpu/test_gpu_check.py
proves it with those packages blocked. GPU tests are marked `gpu` and skipped without CUDA
(tests/conftest.py).

When LOOPLAB_GPU_TESTS_JSON names a file, every test's outcome and seconds are written to it as JSON
the moment the test ends, so a check stopped at its time limit still says which tests passed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

_REPORTS: list[dict] = []


def pytest_runtest_logreport(report):
    path = os.environ.get("LOOPLAB_GPU_TESTS_JSON")
    if not path or not (report.when == "call" or report.outcome != "passed"):
        return  # one entry per test: its call, or the setup/teardown phase that skipped or failed it
    entry = {"test": report.nodeid, "when": report.when, "outcome": report.outcome}
    entry["seconds"] = round(report.duration, 3)
    if report.outcome != "passed":
        entry["reason"] = str(report.longrepr)[-600:]  # the skip reason or the failure's last lines
    _REPORTS.append(entry)
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(_REPORTS, indent=1))
    tmp.replace(path)  # a whole file every time, never half a one
