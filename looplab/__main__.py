"""`python -m looplab ...` is the `looplab` command."""

from looplab.lab.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
