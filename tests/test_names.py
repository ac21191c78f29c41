"""One import name (looplab/names.py): a family bundled with looplab keeps the spelling its runs were
hashed under, a user's module of the same first name wins over looplab's room, and an old grid file's
`from orchestrator import Grid` still submits, from another directory, with a deprecation line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from looplab.names import canonical_family, import_family_module
from looplab.workers.train.spec import Spec


def test_both_spellings_of_a_bundled_family_are_one_run():
    assert canonical_family("looplab.families.huginn:factory") == "families.huginn:factory"
    assert canonical_family("families.huginn:factory") == "families.huginn:factory"
    assert canonical_family("mypkg.model:factory") == "mypkg.model:factory"
    assert canonical_family("looplab.notaroom:factory") == "looplab.notaroom:factory"
    cfg = {"d_model": 32, "n_heads": 2, "mlp": 48}
    old = Spec.from_dict({"family": "families.huginn:factory", "family_config": cfg, "tokens": 1000})
    new = Spec.from_dict({"family": "looplab.families.huginn:factory", "family_config": cfg, "tokens": 1000})
    assert old.to_dict() == new.to_dict() and old.to_dict()["family"] == "families.huginn:factory"


def test_a_users_module_wins_over_a_room_of_the_same_name(tmp_path, monkeypatch):
    (tmp_path / "model.py").write_text("WHO = 'user'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "model", raising=False)
    assert import_family_module("model").WHO == "user"
    # a missing submodule of the user's module is the user's error, not a reason to take looplab's
    with pytest.raises(ModuleNotFoundError, match="model.nothing"):
        import_family_module("model.nothing")
    sys.modules.pop("model", None)


def test_an_old_grid_file_submits_from_another_directory(tmp_path):
    grid = tmp_path / "old_grid.py"
    grid.write_text(
        textwrap.dedent(
            """
            from orchestrator import Grid
            from model.names import Optimizer  # any old room name resolves while the file runs

            g = Grid("old", base={"recipe": "fixed4", "size": "tiny", "tokens": 2048, "batch_size": 2,
                                  "seq_len": 32, "optimizer": Optimizer.ADAMW.value})
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [sys.executable, "-m", "looplab", "--db", str(tmp_path / "q.db"), "submit", str(grid)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "1 job(s): 1 added" in run.stdout
    assert run.stderr.count("by its old name") == 1 and "from looplab.model import" in run.stderr
    # outside a grid file the old names are not ours: nothing of looplab's is importable as `orchestrator`
    probe = subprocess.run(
        [sys.executable, "-c", "import looplab.lab.cli, orchestrator"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode != 0 and "No module named 'orchestrator'" in probe.stderr
    # with no module of that name on the path, a stored family name is looplab's room
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from looplab.names import import_family_module as f; print(f('families.huginn').__name__)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == "looplab.families.huginn", probe.stderr
