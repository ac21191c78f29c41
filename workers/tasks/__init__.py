"""Multiple-choice tasks for the eval job: one JSONL schema, its loader, and generated reasoning tasks.

One item per line (see `workers.tasks.schema`):

    {"context": str, "choices": [str, ...], "gold": int, "subset": str (optional)}

An item is scored as the harness scores a multiple-choice task: the log-likelihood of `" " + choice`
after `context` for every choice; `acc` counts the argmax of the summed log-likelihood, `acc_norm` the
argmax of the log-likelihood per character of the choice. `subset` splits a task for reporting (the
built-in generators write `depth=3`, `length=7`).

Built-in generators (seeded: the same seed writes the same bytes; answers balanced per subset):
- `deduction` (`workers.tasks.deduction`): facts and if-then rules in plain English, a statement to
  judge true / false / unknown, proof depth 0-5 (ProofWriter-like);
- `kinship` (`workers.tasks.kinship`): a chain of family relations from one person to another, the
  relation of the two ends to name, chain length 2-10 (CLUTRR-like).
"""

from __future__ import annotations

from looplab.workers.tasks import deduction, kinship

# name -> module with `generate(n_per_subset: int, seed: int) -> list[Item]`
GENERATORS = {"deduction": deduction, "kinship": kinship}
