"""`python -m looplab.workers.train`: the train job standalone."""

from looplab.workers.train.cli import main

raise SystemExit(main())
