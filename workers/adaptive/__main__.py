"""`python -m looplab.workers.adaptive`: the adaptive job standalone."""

from looplab.workers.adaptive.job import main

raise SystemExit(main())
