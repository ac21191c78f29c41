"""What an export directory already holds, so that exporting again writes only what is new.

`looplab-export.json` in the target directory: the database and target it belongs to, and per job the
target's run id, the last step exported per metric key (a depth sweep counts as the key
`depth/val_loss` with the loop count as its step), the job status last written, whether its results were
written; per view the digest of the rows last written. It is replaced
atomically after each job's writes, so an interrupted export repeats at most the job it was writing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looplab.model.errors import ConfigError
from looplab.orchestrator.db import display_url

MANIFEST = "looplab-export.json"
VERSION = 1


@dataclass
class JobEntry:
    run: str | None = None  # the target's id of the run (MLflow run id, W&B run id, TB directory)
    keys: dict[str, int] = field(default_factory=dict)  # metric key -> last step exported
    status: str | None = None
    results: bool = False  # the finished run's results were written


@dataclass
class Manifest:
    path: Path
    database: str
    target: str
    jobs: dict[int, JobEntry] = field(default_factory=dict)
    views: dict[str, str] = field(default_factory=dict)  # view -> digest of the rows last written
    parts: int = 0  # Parquet: curve part files written

    @classmethod
    def open(cls, out: Path, database: str, target: str) -> Manifest:
        """The manifest of `out` (a new one if there is none); ConfigError when `out` holds an export of
        another database or to another target (their job ids and run ids would mix)."""
        path = out / MANIFEST
        database = display_url(database)  # the password of a database URL stays out of the file
        if not path.exists():
            return cls(path, database, target)
        try:
            raw: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(
                f"export: {path} is not a readable export manifest ({e}); use a new -o directory"
            ) from None
        stored = {"database": display_url(str(raw.get("database", ""))), "target": raw.get("target")}
        for name, mine in (("database", database), ("target", target)):
            if stored[name] != mine:
                raise ConfigError(
                    f"export: {out} holds an export of {name} {raw.get(name)!r}, not {mine!r}; "
                    "use another -o directory"
                )
        jobs = {int(k): JobEntry(**v) for k, v in raw.get("jobs", {}).items()}
        return cls(path, database, target, jobs, dict(raw.get("views", {})), int(raw.get("parts", 0)))

    def job(self, job_id: int) -> JobEntry:
        return self.jobs.setdefault(job_id, JobEntry())

    def save(self) -> None:
        data = {
            "version": VERSION,
            "database": self.database,
            "target": self.target,
            "parts": self.parts,
            "views": self.views,
            "jobs": {str(k): vars(v) for k, v in sorted(self.jobs.items())},
        }
        tmp = self.path.with_name(f".{self.path.name}.tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)
