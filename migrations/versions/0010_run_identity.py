"""What a run is: job hashes of the defining fields only, and a training run's variant holds its batch
and vocabulary.

Revision ID: 0010_run_identity
Revises: 0009_big_counts
Create Date: 2026-12-01

Two identities change (workers/identity.py, orchestrator/variants.py):

- A job's `config_hash` is now computed from its spec without the fields that only say how it
  executes (a train job's micro_batch_size, bucketing, compile, device, cadences and calibration
  length; a depth sweep's micro_batch_size and device; an eval's device), so submitting a grid again
  with another device or cadence, or after an upgrade added such a field, adds nothing. Every stored
  hash is re-derived here with that rule, dependencies first (a job's hash includes its
  dependencies'). Two stored jobs that now have the same identity keep distinct hashes: the first (by
  id) gets the new hash, the other keeps its old one, so nothing is merged or lost.
- A training run's `variant_id` now also holds its global batch and asked vocabulary, so runs at 8
  and at 256 sequences per step (or on a byte and a BPE vocabulary) are never averaged as seeds:
  new id = the first 12 hex digits of sha256 of {architecture: the old id, batch_size, vocab_size}. The
  new columns `jobs.global_batch` / `jobs.vocab_size` hold the two; a follow-up that carried its train
  job's variant gets the new one. A decode benchmark keeps the architecture's id.

Everything the derivation needs is written here as it is at this revision (a revision never imports
live code). Downgrade drops the two columns; hashes and variant ids stay re-derived (they remain
unique and consistent, and the old code reads them as opaque strings).
"""

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision: str = "0010_run_identity"
down_revision: str | Sequence[str] | None = "0009_big_counts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The execution fields of each kind's Spec at this revision (workers/*.py, `metadata=EXECUTION`).
EXECUTION = {
    "train": {
        "micro_batch_size",
        "bucketing",
        "compile",
        "device",
        "log_every",
        "eval_every",
        "eval_loops",
        "ckpt_every",
        "ckpt_minutes",
        "calib_steps",
    },
    "depth_sweep": {"micro_batch_size", "device"},
    "eval": {"device"},
}
MATCH_TIME = "match_time_of"
VARIANT_ID_HEX = 12
DEFAULT_BPE_VOCAB = 512  # workers.data.DataSpec.vocab_size
BYTE_VOCAB = 256

jobs = sa.table(
    "jobs",
    sa.column("id", sa.Integer),
    sa.column("kind", sa.String),
    sa.column("config", sa.Text),
    sa.column("config_hash", sa.String),
    sa.column("budget", sa.Text),
    sa.column("variant_id", sa.String),
    sa.column("global_batch", sa.Integer),
    sa.column("vocab_size", sa.Integer),
)
job_deps = sa.table("job_deps", sa.column("job_id", sa.Integer), sa.column("depends_on", sa.Integer))


def _sha256(obj) -> str:
    return hashlib.sha256(
        json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    ).hexdigest()


def _identity(kind: str, spec: dict) -> dict:
    drop = EXECUTION.get(kind, set())
    return {k: v for k, v in spec.items() if k not in drop}


def _tokenizer_file_vocab(path: str) -> int | None:
    """Tokens of a tokenizer.json: its model's vocabulary plus added tokens, as read at submission."""
    try:
        saved = json.loads(Path(path).expanduser().read_text())
        vocab = saved["model"]["vocab"]
        tokens = set(vocab) if isinstance(vocab, dict) else {entry[0] for entry in vocab}
        tokens |= {added["content"] for added in saved.get("added_tokens") or []}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return len(tokens) or None


def _asked_vocab(spec: dict) -> int | None:
    data = spec.get("data") if isinstance(spec.get("data"), dict) else {}
    tokenizer = data.get("tokenizer", "byte")
    if tokenizer == "byte":
        return BYTE_VOCAB
    if tokenizer == "bpe":
        return int(data.get("vocab_size", DEFAULT_BPE_VOCAB))
    return _tokenizer_file_vocab(tokenizer) if isinstance(tokenizer, str) else None


def _is_match_time(budget: str | None) -> bool:
    try:
        return MATCH_TIME in (json.loads(budget) if budget else {})
    except (TypeError, ValueError):
        return False


def upgrade() -> None:
    op.add_column("jobs", sa.Column("global_batch", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("vocab_size", sa.Integer(), nullable=True))
    conn = op.get_bind()
    rows = {r.id: r for r in conn.execute(sa.select(jobs).order_by(jobs.c.id)).all()}
    deps: dict[int, list[int]] = {}
    for job_id, dep in conn.execute(sa.select(job_deps.c.job_id, job_deps.c.depends_on)).all():
        deps.setdefault(job_id, []).append(dep)
    specs = {}
    for job_id, r in rows.items():
        try:
            specs[job_id] = json.loads(r.config)
        except (TypeError, ValueError):
            specs[job_id] = None  # left as it is

    # hashes, dependencies first (job ids grow with submission order, but a match-time job may name a
    # train job submitted after it in the same grid file: visit in dependency order)
    new_hash: dict[int, str] = {}
    taken = set()
    order: list[int] = []
    seen: set[int] = set()

    def visit(job_id: int) -> None:
        if job_id in seen or job_id not in rows:
            return
        seen.add(job_id)
        for dep in deps.get(job_id, []):
            visit(dep)
        order.append(job_id)

    for job_id in rows:
        visit(job_id)
    for job_id in order:
        r, spec = rows[job_id], specs[job_id]
        dep_hashes = sorted(
            new_hash.get(d, rows[d].config_hash) for d in dict.fromkeys(deps.get(job_id, [])) if d in rows
        )
        if spec is None:
            new_hash[job_id] = r.config_hash
            continue
        h = _sha256(
            {
                "kind": r.kind,
                "spec": _identity(r.kind, spec),
                "deps": dep_hashes,
                "match_time": _is_match_time(r.budget),
            }
        )
        new_hash[job_id] = r.config_hash if h in taken else h
        taken.add(new_hash[job_id])
    # two passes, so no update meets a hash another row still holds (the column is unique)
    for job_id, h in new_hash.items():
        if h != rows[job_id].config_hash:
            conn.execute(jobs.update().where(jobs.c.id == job_id).values(config_hash=f"~{job_id}"))
    for job_id, h in new_hash.items():
        if h != rows[job_id].config_hash:
            conn.execute(jobs.update().where(jobs.c.id == job_id).values(config_hash=h))

    # training runs' variants: the old id is the architecture's
    new_variant: dict[int, tuple[str, int | None, int | None]] = {}
    for job_id, r in rows.items():
        spec = specs[job_id]
        if r.kind != "train" or not isinstance(spec, dict):
            continue
        batch = spec.get("batch_size")
        batch = batch if isinstance(batch, int) and not isinstance(batch, bool) else None
        vocab = _asked_vocab(spec)
        if r.variant_id is None:  # a config no variant was derived from: only its batch and vocabulary
            conn.execute(
                jobs.update().where(jobs.c.id == job_id).values(global_batch=batch, vocab_size=vocab)
            )
            continue
        vid = _sha256({"architecture": r.variant_id, "batch_size": batch, "vocab_size": vocab})[
            :VARIANT_ID_HEX
        ]
        new_variant[job_id] = (vid, batch, vocab)
        conn.execute(
            jobs.update()
            .where(jobs.c.id == job_id)
            .values(variant_id=vid, global_batch=batch, vocab_size=vocab)
        )
    # follow-ups that carried their train job's variant (depth sweeps, evals) carry the new one
    for job_id, r in rows.items():
        if r.kind == "train" or r.variant_id is None:
            continue
        for dep in deps.get(job_id, []):
            if dep in new_variant and rows[dep].variant_id == r.variant_id:
                vid, batch, vocab = new_variant[dep]
                conn.execute(
                    jobs.update()
                    .where(jobs.c.id == job_id)
                    .values(variant_id=vid, global_batch=batch, vocab_size=vocab)
                )
                break


def downgrade() -> None:
    for name in ("runs", "curves", "depth", "decode", "tasks", "geometry", "interactions"):
        op.execute(f"DROP VIEW IF EXISTS {name}")  # they read the columns; re-created at head
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("vocab_size")
        batch.drop_column("global_batch")
