"""A depth sweep's planned memory is that of one forward: `micro_batch_size` sequences where set (the
batch runs in several forwards, the same losses), else the whole batch. The README's GPU study read
"WILL NOT FIT: 158 GB" for every sweep because the micro batch was not counted."""

from __future__ import annotations

import io

import pandas as pd

from tests.cli import looplab_here

GRID = """from looplab import Grid
g = Grid('g', base={{'recipe': 'lean', 'size': 'tiny', 'tokens': 4096}}, then=['depth_sweep'],
         follow={{'depth_sweep': {sweep}}})
"""


def _sweep_memory(tmp_path, capsys, sweep: dict) -> float:
    f = tmp_path / "grids.py"
    f.write_text(GRID.format(sweep=sweep))
    ran = looplab_here(capsys, "--db", tmp_path / "none.db", "plan", f, "--device", "h100", "--csv")
    assert ran.returncode == 0, ran.stderr
    table = pd.read_csv(io.StringIO(ran.stdout[ran.stdout.index("job") :]))
    return float(table.loc[table["kind"] == "depth_sweep", "peak_mem_mb"].iloc[0])


def test_a_depth_sweeps_planned_memory_is_one_forwards(tmp_path, capsys):
    from looplab.model.memory import forward_memory
    from looplab.model.presets import preset

    whole = _sweep_memory(tmp_path, capsys, {"batch_size": 64})
    split = _sweep_memory(tmp_path, capsys, {"batch_size": 64, "micro_batch_size": 4})
    cfg = preset("lean", "tiny")
    assert whole * 2**20 == forward_memory(cfg, 64)
    assert split * 2**20 == forward_memory(cfg, 4) < forward_memory(cfg, 64)
