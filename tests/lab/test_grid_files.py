"""A grid file as a newcomer writes it: a syntax error is one line with the file and line, every bad grid
of a file is reported at once, a misspelt key or name gets "did you mean", and a family module beside
the grid file imports during `looplab submit` (and the command says what the workers need)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from looplab import Grid, Queue
from looplab.model.errors import ConfigError
from looplab.model.fields import did_you_mean
from tests.cli import looplab_here

ROOT = Path(__file__).resolve().parents[2]
TINY = "'size': 'tiny', 'tokens': 4096"


def test_a_syntax_error_is_one_line_with_the_file_and_line(tmp_path, capsys):
    f = tmp_path / "grids.py"
    f.write_text(f"from looplab import Grid\n\na = Grid('a', base={{'recipe': 'lean', {TINY}\n")
    ran = looplab_here(capsys, "--db", tmp_path / "q.db", "submit", f)
    assert ran.returncode == 2 and ran.stdout == ""
    (line,) = ran.stderr.strip().splitlines()
    assert line.startswith(f"looplab submit: error: {f}:3:") and "syntax error: '{' was never closed" in line
    assert not (tmp_path / "q.db").exists()  # a file that does not load creates nothing


def test_every_bad_grid_of_a_file_is_reported_at_once_with_did_you_mean(tmp_path, capsys):
    f = tmp_path / "grids.py"
    f.write_text(
        "from looplab import Grid\n"
        f"a = Grid('a', base={{'recipe': 'lean', {TINY}, 'bach_size': 8}})\n"
        f"ok = Grid('ok', base={{'recipe': 'lean', {TINY}}})\n"
        f"b = Grid('b', base={{'recipe': 'lena', {TINY}}})\n"
        f"c = Grid('c', base={{'recipe': 'lean', {TINY}}}, sweep={{'model.loopz': [2, 4]}})\n"
    )
    db = tmp_path / "q.db"
    ran = looplab_here(capsys, "--db", db, "submit", f)
    assert ran.returncode == 2
    lines = ran.stderr.strip().splitlines()
    assert lines[0] == "looplab submit: error: 3 of 4 grids refused:"
    assert lines[1].startswith(
        "  grid 'a': train: unknown key 'bach_size' (did you mean 'batch_size'?); accepted:"
    )
    assert lines[2].startswith("  grid 'b': ") and "unknown 'lena' (did you mean 'lean'?)" in lines[2]
    assert lines[3].startswith("  grid 'c': ") and "unknown key 'loopz' (did you mean 'loops'?)" in lines[3]
    assert Queue(db=db).status().empty  # nothing stored, the good grid included


def test_did_you_mean_only_for_a_close_name():
    assert did_you_mean("bach_size", ["batch_size", "seed"]) == " (did you mean 'batch_size'?)"
    assert did_you_mean("zzz", ["batch_size", "seed"]) == ""
    from looplab.model.presets import preset

    with pytest.raises(
        ConfigError, match=r"^model: unknown key 'n_recurent' \(did you mean 'n_recurrent'\?\)"
    ):
        preset("lean", "tiny", n_recurent=2)


def test_a_family_module_beside_the_grid_file_imports_during_submit(tmp_path, capsys, monkeypatch):
    shutil.copy(ROOT / "examples" / "universal_transformer.py", tmp_path / "beside_family_53.py")
    f = tmp_path / "grids.py"
    f.write_text(
        "from looplab import Grid\n"
        "g = Grid('fam', base={'recipe': 'lean', 'size': 'tiny', 'tokens': 4096, 'optimizer': 'adamw',\n"
        "    'family': 'beside_family_53:factory', 'family_config': {'d_model': 32, 'n_heads': 2}})\n"
    )
    monkeypatch.chdir(ROOT)  # not the grid file's directory
    db = tmp_path / "q.db"
    ran = looplab_here(capsys, "--db", db, "submit", f)
    assert ran.returncode == 0, ran.stderr
    assert "1 added" in ran.stdout
    assert f"beside_family_53 imported from {tmp_path} (beside the grid file)" in ran.stderr
    assert f"PYTHONPATH={tmp_path}" in ran.stderr
    assert Queue(db=db).status()["status"].tolist() == ["queued"]
    import sys

    assert str(tmp_path) not in sys.path  # only while the file was read and validated


def test_grid_objects_still_report_the_first_error_alone(tmp_path):
    q = Queue(db=tmp_path / "q.db")
    with pytest.raises(ConfigError, match=r"^grid 'x': train: unknown key 'bach_size' \(did you mean"):
        q.submit(Grid("x", base={"recipe": "lean", "size": "tiny", "tokens": 4096, "bach_size": 8}))
