"""`looplab` run in the test's own process (lab.cli.main) with pytest capturing its output: what
a shell would see of a command, without a Python start and the imports of a subprocess."""

from __future__ import annotations

from typing import NamedTuple


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def looplab_here(capsys, *args: str) -> Ran:
    """`looplab ARGS`: its exit status and what it printed (output printed before the call is dropped)."""
    from looplab.lab.cli import main

    capsys.readouterr()
    returncode = main([str(a) for a in args])
    out = capsys.readouterr()
    return Ran(returncode, out.out, out.err)
