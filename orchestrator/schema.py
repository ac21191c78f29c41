"""The results database: SQLAlchemy 2.0 typed ORM models.

This module is the single definition of the schema. Alembic revisions in `migrations/` are
checked against it (no drift); `orchestrator.jobqueue` alone writes job and attempt rows,
`orchestrator.writer` writes what workers report, the dashboard reads.

Conventions:
- every timestamp is a float of epoch seconds (`time.time()`, UTC, one clock): heartbeats are
  compared in total seconds, never as naive/aware datetimes;
- JSON payloads (configs, budgets, resources) are canonical JSON text, so the same config hashes
  the same way everywhere;
- the config of a job is the source of truth; `recipe`, `size`, `seed` (and how a run loops:
  `loop_sampler`, `loops`, its variant and resolved architecture) are copied out of it at submission
  so that views, filters and the dashboard need no JSON functions (portable beyond SQLite) and no
  model code;
- token and parameter counts are 64-bit (`BigInteger`, rev. 0009): PostgreSQL's INTEGER stops at 2^31;
- `jobs.status` and `attempts.outcome` hold the values of `orchestrator.states` as plain strings.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from looplab.orchestrator.jobkinds import result_tables
from looplab.orchestrator.states import AttemptOutcome, JobStatus

# Deterministic constraint names, so Alembic autogenerate and batch mode on SQLite agree.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class GridRow(Base):
    """A submitted grid as stored (the user-facing `orchestrator.grid.Grid` is what was submitted)."""

    __tablename__ = "grids"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    spec: Mapped[str] = mapped_column(Text)  # canonical JSON of the Grid as submitted
    spec_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    # who submitted it (rev. 0024): PostgreSQL's session user, set by a trigger; SQLite's OS user
    owner: Mapped[str | None] = mapped_column(String(63))


class Job(Base):
    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    grid_id: Mapped[int | None] = mapped_column(ForeignKey("grids.id"), index=True)
    kind: Mapped[str] = mapped_column(
        String(32)
    )  # train | depth_sweep | decode_bench | eval | a plugin's kind
    config: Mapped[str] = mapped_column(Text)  # canonical JSON: the job's full spec
    config_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # copied out of config for views and filters
    recipe: Mapped[str | None] = mapped_column(String(64))
    size: Mapped[str | None] = mapped_column(String(32))
    seed: Mapped[int | None] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=JobStatus.QUEUED)  # a JobStatus value
    priority: Mapped[int] = mapped_column(Integer, default=0)
    owner: Mapped[str | None] = mapped_column(String(63))  # who submitted it (rev. 0024, as GridRow.owner)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    # budget as submitted, e.g. {"tokens": 2e6} | {"time_s": 60} | {"match_time_of": 12}
    budget: Mapped[str | None] = mapped_column(Text)
    # resolved budget (filled at submission, or when the referenced job succeeds)
    budget_tokens: Mapped[int | None] = mapped_column(BigInteger)
    budget_time_s: Mapped[float | None] = mapped_column(Float)
    resources: Mapped[str | None] = mapped_column(Text)  # JSON: {"num_gpus": 1, "num_cpus": 1}
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    heartbeat_at: Mapped[float | None] = mapped_column(Float)
    worker: Mapped[str | None] = mapped_column(String(200))  # node / pid that runs it
    gpu_ids: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)  # last traceback or reason
    # the dependency whose failure or cancellation failed this job (set by the cascade, cleared by a
    # retry): a retry of that dependency re-queues exactly the jobs it took down (revision 0003)
    failed_dependency: Mapped[int | None] = mapped_column(Integer)
    artifact_dir: Mapped[str | None] = mapped_column(Text)
    # what its artifact dir keeps once it succeeded (orchestrator/retention.py): "final" (the final
    # weights only) or "all"; none for jobs submitted before the rule, left as they are (revision 0011)
    retention: Mapped[str | None] = mapped_column(String(16))
    checkpoint_path: Mapped[str | None] = mapped_column(Text)
    checkpoint_step: Mapped[int | None] = mapped_column(Integer)
    progress_done: Mapped[float | None] = mapped_column(Float)  # e.g. steps done
    progress_total: Mapped[float | None] = mapped_column(Float)
    eta_s: Mapped[float | None] = mapped_column(Float)
    # how a train job loops (a depth sweep copies its train job's): the preset's sampler (fixed |
    # poisson_seq | poisson_batch) and loop count (the trained count, or the sampler's mean), with the
    # config's model overrides applied; filled at submission so readers need no model code (rev. 0003)
    loop_sampler: Mapped[str | None] = mapped_column(String(16))
    loops: Mapped[int | None] = mapped_column(Integer)
    # The variant a train or decode-bench job is about (a depth sweep copies its train job's): the
    # model as recipe + size + the model overrides that differ from the preset. The architecture's id =
    # the first 12 hex digits of sha256 of that canonical JSON (a decode bench's variant_id); seeds of
    # one variant share it. variant_label = the label given in the grid, else the recipe and
    # ` · key=value` per differing override (rev. 0004).
    variant_id: Mapped[str | None] = mapped_column(String(16))
    variant_label: Mapped[str | None] = mapped_column(String(200))
    # A training run's variant also holds its global batch (batch_size: sequences per optimizer step) and the
    # vocabulary its tokenizer asks for: variant_id = sha256 of {architecture's id, batch_size,
    # vocab_size}; NULL for a job that trains nothing (a decode bench keeps the architecture's id) (rev. 0010).
    global_batch: Mapped[int | None] = mapped_column(Integer)
    vocab_size: Mapped[int | None] = mapped_column(Integer)
    # The resolved architecture (model.counts.arch_summary of the model the job trains), filled at
    # submission: effective_depth = n_prelude + n_recurrent * loops + n_coda; n_once = non-embedding
    # parameters applied once per token, n_rec = the shared recurrent block's; flops_per_token =
    # training forward+backward FLOPs per token, expected over the loop sampler (rev. 0004).
    n_prelude: Mapped[int | None] = mapped_column(Integer)
    n_recurrent: Mapped[int | None] = mapped_column(Integer)
    n_coda: Mapped[int | None] = mapped_column(Integer)
    effective_depth: Mapped[float | None] = mapped_column(Float)
    d_model: Mapped[int | None] = mapped_column(Integer)
    injection: Mapped[str | None] = mapped_column(String(16))
    n_params: Mapped[int | None] = mapped_column(BigInteger)
    n_once: Mapped[int | None] = mapped_column(Integer)
    n_rec: Mapped[int | None] = mapped_column(Integer)
    flops_per_token: Mapped[float | None] = mapped_column(Float)
    # the budget in FLOPs when it was given so (budget_tokens is then its whole-step token count)
    budget_flops: Mapped[float | None] = mapped_column(Float)
    # the planner's wall-time estimate at submission and its source (measured | flop_model | finished;
    # see lab.planner), kept so that planned and actual times can be compared (rev. 0005)
    planned_seconds: Mapped[float | None] = mapped_column(Float)
    planned_source: Mapped[str | None] = mapped_column(String(16))
    # The driver that holds the running attempt (rev. 0008): its host name, process id and the
    # process's start time (epoch seconds; NULL where it cannot be read), so that a driver starting on
    # that host can tell a dead predecessor (pid gone, or reused by another process) from a live one.
    driver_host: Mapped[str | None] = mapped_column(String(200))
    driver_pid: Mapped[int | None] = mapped_column(Integer)
    driver_started: Mapped[float | None] = mapped_column(Float)
    # a queued job is not claimed before this time (epoch seconds): the retry backoff after a failed
    # attempt; also where its waiting time for priority aging counts from (rev. 0008)
    not_before: Mapped[float | None] = mapped_column(Float)
    # where an imported model came from, SOURCE@REVISION (`hf:ORG/NAME@<commit>`, or a directory and the
    # sha256 of its config and weights); NULL for a model trained here. A follow-up copies its model's
    # (rev. 0012)
    imported_from: Mapped[str | None] = mapped_column(Text)
    # How a train job's step runs, copied out of its config and resources at submission (rev. 0014): the
    # micro-batch as given (NULL: the whole batch in one forward, or `auto`: the trainer picks it, and its
    # train_results row says what it picked) and the data-parallel workers it asks for (every kind; 1
    # unless its resources say `workers`). The global batch is `global_batch` (rev. 0010).
    micro_batch_size: Mapped[int | None] = mapped_column(Integer)
    workers: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        Index("ix_jobs_status_priority", "status", "priority"),
        Index("ix_jobs_recipe_size_seed", "recipe", "size", "seed"),
        Index("ix_jobs_variant_id", "variant_id"),
    )


class JobDep(Base):
    __tablename__ = "job_deps"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    depends_on: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)

    __table_args__ = (Index("ix_job_deps_depends_on", "depends_on"),)


class Attempt(Base):
    __tablename__ = "attempts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    n: Mapped[int] = mapped_column(Integer)  # 1, 2, ...
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    outcome: Mapped[str] = mapped_column(
        String(16), default=AttemptOutcome.RUNNING
    )  # an AttemptOutcome value
    error: Mapped[str | None] = mapped_column(Text)
    resumed_from_step: Mapped[int | None] = mapped_column(Integer)
    worker: Mapped[str | None] = mapped_column(String(200))
    # the driver that claimed this attempt (rev. 0008; see Job.driver_host)
    driver_host: Mapped[str | None] = mapped_column(String(200))
    driver_pid: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (UniqueConstraint("job_id", "n"),)


class Metric(Base):
    """Long-format curves. (job_id, key, step) is unique: a resumed attempt that re-reports a
    step overwrites it, so every point is stored exactly once.

    `curve_level` (rev. 0015) lets a reader draw a curve of any length from about as many rows as it
    draws: the point at position p (0-based, by step, within its job and key) has level = the number
    of trailing zero bits of p (the first point: CURVE_LEVEL_TOP), so "every 2^L-th point" is
    `curve_level >= L`, one range of `ix_metrics_curve_level` (analysis.curves.downsample is the
    rule; orchestrator.writer keeps the levels as points arrive). The index holds only levels >= 1
    (half the points): a curve short enough to be read whole is read through the unique index."""

    __tablename__ = "metrics"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(64))  # train_loss, val_loss, val_bpb, lr, tokens_per_s, ...
    step: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int | None] = mapped_column(BigInteger)
    wall_s: Mapped[float | None] = mapped_column(Float)  # training seconds (excl. eval/ckpt)
    value: Mapped[float] = mapped_column(Float)
    curve_level: Mapped[int] = mapped_column(SmallInteger, default=0, server_default="0")

    __table_args__ = (
        UniqueConstraint("job_id", "key", "step"),
        # iso-time comparisons read one curve ordered by training seconds (revision 0002)
        Index("ix_metrics_job_id_key_wall_s", "job_id", "key", "wall_s"),
        # the downsampled reads (revision 0015): partial, a reader names `curve_level >= 1` to use it
        Index(
            "ix_metrics_curve_level",
            "job_id",
            "key",
            "curve_level",
            sqlite_where=text("curve_level >= 1"),
            postgresql_where=text("curve_level >= 1"),
        ),
    )


class LatestMetric(Base):
    """Last value per (job, key): listings and the Queue page never scan the whole history.

    The row is the curve's last point by step, and `points` (rev. 0015) is how many points the curve
    has, so a reader knows how much to downsample it without counting."""

    __tablename__ = "latest_metrics"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    step: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int | None] = mapped_column(BigInteger)
    wall_s: Mapped[float | None] = mapped_column(Float)
    value: Mapped[float] = mapped_column(Float)
    points: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class TrainResult(Base):
    """One row per finished training job: the numbers a paper table needs."""

    __tablename__ = "train_results"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    steps: Mapped[int] = mapped_column(Integer)
    tokens: Mapped[int] = mapped_column(BigInteger)  # tokens actually trained on
    train_seconds: Mapped[float] = mapped_column(Float)  # excl. eval and checkpoint time
    eval_seconds: Mapped[float | None] = mapped_column(Float)
    ckpt_seconds: Mapped[float | None] = mapped_column(Float)
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    final_train_loss: Mapped[float | None] = mapped_column(Float)
    final_val_loss: Mapped[float | None] = mapped_column(Float)
    final_val_bpb: Mapped[float | None] = mapped_column(Float)
    peak_mem_mb: Mapped[float | None] = mapped_column(Float)
    n_params: Mapped[int | None] = mapped_column(BigInteger)
    n_params_non_embedding: Mapped[int | None] = mapped_column(BigInteger)
    time_budget_s: Mapped[float | None] = mapped_column(Float)  # set in time-budget mode
    calib_tokens_per_s: Mapped[float | None] = mapped_column(Float)
    device: Mapped[str | None] = mapped_column(String(64))
    # FLOP accounting (rev. 0004): training forward+backward FLOPs per token of the model, their total
    # over the tokens trained, that total per training second, the model-FLOPs utilisation against the
    # device's peak (GPU only) and the fraction of recurrent-round FLOPs computed for padding
    flops_per_token: Mapped[float | None] = mapped_column(Float)
    train_flops: Mapped[float | None] = mapped_column(Float)
    achieved_flops_per_s: Mapped[float | None] = mapped_column(Float)
    mfu: Mapped[float | None] = mapped_column(Float)
    padding_waste: Mapped[float | None] = mapped_column(Float)
    # other jobs running on the node at any time during the training (0 = the device to itself;
    # NULL = not recorded), from the driver's bookkeeping (rev. 0005)
    concurrent_jobs: Mapped[int | None] = mapped_column(Integer)
    # the data-parallel workers that trained it (rev. 0014): train_seconds are wall seconds of that
    # many devices at once (device-seconds = train_seconds x workers)
    workers: Mapped[int | None] = mapped_column(Integer)
    # sequences per forward the trainer ran (what `micro_batch_size: auto` picked on its device) (rev. 0014)
    micro_batch_size: Mapped[int | None] = mapped_column(Integer)
    # the tokenizer's vocabulary, which the model, n_params and the FLOPs use, and the one the spec asked
    # for: a BPE gets fewer tokens than asked when its corpus has too little text (rev. 0016; NULL before)
    vocab_size: Mapped[int | None] = mapped_column(Integer)
    vocab_size_asked: Mapped[int | None] = mapped_column(Integer)


class DepthEval(Base):
    __tablename__ = "depth_evals"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    loops: Mapped[int] = mapped_column(Integer, primary_key=True)
    val_loss: Mapped[float] = mapped_column(Float)
    val_bpb: Mapped[float | None] = mapped_column(Float)
    # loss on far-copy tokens and on the others, by definition `far_definition` (workers/validation.py):
    # 1 (rows before rev. 0018): the target also occurs beyond the smallest attention window; 2: its
    # previous occurrence lies more than `far_distance` tokens back and none lies within it
    far_copy_loss: Mapped[float | None] = mapped_column(Float)
    near_loss: Mapped[float | None] = mapped_column(Float)
    # rev. 0018 (NULL before; far_definition 1 where a split was stored): far tokens / predicted tokens,
    # the distance, the definition, and the first round whose change falls below the bf16 resolution
    # of its state (NULL: none does; model/geometry.py)
    far_share: Mapped[float | None] = mapped_column(Float)
    far_distance: Mapped[int | None] = mapped_column(Integer)
    far_definition: Mapped[int | None] = mapped_column(Integer)
    bf16_round: Mapped[int | None] = mapped_column(Integer)
    # rev. 0020: loss and bits per byte on the test split (workers/evaluate/heldout.py), for sweeps that asked
    # for it (`test_split`); NULL otherwise and for every sweep before
    test_loss: Mapped[float | None] = mapped_column(Float)
    test_bpb: Mapped[float | None] = mapped_column(Float)


class RoundDelta(Base):
    __tablename__ = "round_deltas"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    loops: Mapped[int] = mapped_column(Integer, primary_key=True)  # loop count of the forward pass
    round: Mapped[int] = mapped_column(Integer, primary_key=True)  # 1-based
    rel_change: Mapped[float] = mapped_column(Float)  # ||h_t - h_{t-1}|| / ||h_{t-1}||
    # rev. 0007 (NULL for older sweeps): mean angle between h_t and h_{t-1} in radians, and the mean
    # over tokens of the variance of h_t across channels (definitions in model/geometry.py)
    angle: Mapped[float | None] = mapped_column(Float)
    state_var: Mapped[float | None] = mapped_column(Float)
    # rev. 0018 (NULL before): mean ||Δ_t|| / mean ||Δ_{t-1}|| (NULL for round 1) and the mean
    # ||bf16(h_{t-1}) - h_{t-1}|| / ||h_{t-1}|| of the state round t changes
    change_ratio: Mapped[float | None] = mapped_column(Float)
    bf16_resolution: Mapped[float | None] = mapped_column(Float)


class RoundInteraction(Base):
    """Computational interaction at inference depth `loops` (rev. 0007): how much skipping round
    `skipped` changes the update of the later round `round` (both 1-based; see model/geometry.py)."""

    __tablename__ = "round_interactions"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    loops: Mapped[int] = mapped_column(Integer, primary_key=True)
    skipped: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    interaction: Mapped[float] = mapped_column(Float)


class DecodeBench(Base):
    __tablename__ = "decode_benches"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    arch: Mapped[str] = mapped_column(String(64))  # recipe name
    size: Mapped[str | None] = mapped_column(String(32))
    context_len: Mapped[int] = mapped_column(Integer)
    batch_size: Mapped[int] = mapped_column(Integer)
    ms_per_token: Mapped[float] = mapped_column(Float)  # median
    ms_p10: Mapped[float | None] = mapped_column(Float)
    ms_p90: Mapped[float | None] = mapped_column(Float)
    kv_cache_mb: Mapped[float] = mapped_column(Float)
    device: Mapped[str] = mapped_column(String(64))
    dtype: Mapped[str] = mapped_column(String(16))
    cuda_graph: Mapped[bool] = mapped_column(Boolean, default=False)
    # other jobs running on the node at any time during the benchmark (0 = the device to itself;
    # NULL = not recorded), from the driver's bookkeeping (rev. 0005)
    concurrent_jobs: Mapped[int | None] = mapped_column(Integer)


class TaskScore(Base):
    """Multiple-choice task accuracy of an eval job at one inference loop count (rev. 0006): one row per
    subset of the task (e.g. `depth=3`) and one for the whole task (subset `all`)."""

    __tablename__ = "task_scores"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    task: Mapped[str] = mapped_column(String(128), primary_key=True)
    subset: Mapped[str] = mapped_column(String(64), primary_key=True)
    loops: Mapped[int] = mapped_column(Integer, primary_key=True)  # inference loop count
    category: Mapped[str | None] = mapped_column(String(16))  # knowledge | reasoning | NULL (unknown)
    n: Mapped[int] = mapped_column(Integer)  # items scored
    acc: Mapped[float] = mapped_column(Float)
    acc_norm: Mapped[float | None] = mapped_column(Float)  # choice log-likelihood per character
    stderr: Mapped[float | None] = mapped_column(Float)  # of acc: sample std / sqrt(n)
    chance: Mapped[float | None] = mapped_column(Float)  # mean of 1 / number of choices


class AdaptiveEval(Base):
    """One cell of an adaptive job's grid (rev. 0013_adaptive, workers/adaptive/job.py): an exit rule at a
    threshold (rule `fixed`: the fixed depth max_rounds, threshold NULL) under a KV strategy, on the
    validation set. `config` names the cell (`kl<0.01 | per_round`); `changes_function`: the strategy
    (first, last_m) differs from the trained model even without exits. `mean_rounds` = recurrent rounds
    per token; `forward_flops_per_token` = forward FLOPs a token-by-token implementation spends (the rule's
    readouts, `rule_flops_per_token`, included); `equivalent_rounds` = the fixed depth of the trained
    model spending as much. `kv_mib`: the static cache of one seq_len sequence in bf16; `kv_mib_needed`:
    what the strategy must keep given the exits (less than kv_mib only for `latest`)."""

    __tablename__ = "adaptive_evals"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    config: Mapped[str] = mapped_column(String(96), primary_key=True)
    rule: Mapped[str] = mapped_column(String(16))  # state | kl | entropy | argmax | fixed
    threshold: Mapped[float | None] = mapped_column(Float)  # eps, or k for argmax; may be infinite
    kv_strategy: Mapped[str] = mapped_column(String(16))  # per_round | latest | first | last_m | a family's
    kv_m: Mapped[int | None] = mapped_column(Integer)  # last_m only
    min_rounds: Mapped[int] = mapped_column(Integer)
    max_rounds: Mapped[int] = mapped_column(Integer)
    changes_function: Mapped[bool] = mapped_column(Boolean)
    val_loss: Mapped[float] = mapped_column(Float)
    val_bpb: Mapped[float | None] = mapped_column(Float)
    tokens: Mapped[int] = mapped_column(BigInteger)
    mean_rounds: Mapped[float] = mapped_column(Float)
    equivalent_rounds: Mapped[float | None] = mapped_column(Float)
    forward_flops_per_token: Mapped[float | None] = mapped_column(Float)
    rule_flops_per_token: Mapped[float | None] = mapped_column(Float)
    fixed_flops_per_token: Mapped[float | None] = mapped_column(Float)
    kv_mib: Mapped[float | None] = mapped_column(Float)
    kv_mib_needed: Mapped[float | None] = mapped_column(Float)


class AdaptiveExitRound(Base):
    """How many validation tokens of a cell stopped after round `round` (rev. 0013_adaptive), by token
    position (`split` position: bucket of positions [bucket_lo, bucket_hi)) and by how hard the token
    is (`split` loss: its loss at the fixed depth max_rounds in [bucket_lo, bucket_hi) nats)."""

    __tablename__ = "adaptive_exit_rounds"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    config: Mapped[str] = mapped_column(String(96), primary_key=True)
    split: Mapped[str] = mapped_column(String(16), primary_key=True)  # position | loss
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)  # 1-based exit round
    bucket_lo: Mapped[float] = mapped_column(Float)
    bucket_hi: Mapped[float] = mapped_column(Float)  # may be infinite (the last loss bucket)
    count: Mapped[int] = mapped_column(BigInteger)


class AdaptiveTaskScore(Base):
    """Multiple-choice task accuracy of a cell of an adaptive job (rev. 0013_adaptive), as `task_scores`."""

    __tablename__ = "adaptive_task_scores"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    config: Mapped[str] = mapped_column(String(96), primary_key=True)
    task: Mapped[str] = mapped_column(String(128), primary_key=True)
    subset: Mapped[str] = mapped_column(String(64), primary_key=True)
    category: Mapped[str | None] = mapped_column(String(16))
    n: Mapped[int] = mapped_column(Integer)
    acc: Mapped[float] = mapped_column(Float)
    acc_norm: Mapped[float | None] = mapped_column(Float)
    stderr: Mapped[float | None] = mapped_column(Float)
    chance: Mapped[float | None] = mapped_column(Float)


class AdaptiveDecode(Base):
    """Decode latency of a cell against the fixed depth (rev. 0013_adaptive): `mode` masked (every
    round runs, stopped rows held) or batch_stop (a step's rounds end when every row stopped); one step
    decodes one token per row of `batch_size`. `mean_step_rounds` = rounds a step ran (the batch's
    padding to its slowest row), `speedup` = fixed_ms_per_token / ms_per_token. `equal_loss_rounds`
    (rev. 0021_equal_loss_decode): the shallowest fixed depth whose validation loss is at most the
    cell's (NULL: none up to max_rounds is, or a row from before), `equal_loss_ms_per_token` its decode
    time, timed the same way."""

    __tablename__ = "adaptive_decodes"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    config: Mapped[str] = mapped_column(String(96), primary_key=True)
    batch_size: Mapped[int] = mapped_column(Integer, primary_key=True)
    mode: Mapped[str] = mapped_column(String(16), primary_key=True)
    context_len: Mapped[int] = mapped_column(Integer)
    ms_per_token: Mapped[float] = mapped_column(Float)  # median step time
    ms_p10: Mapped[float | None] = mapped_column(Float)
    ms_p90: Mapped[float | None] = mapped_column(Float)
    tokens_per_s: Mapped[float | None] = mapped_column(Float)
    fixed_ms_per_token: Mapped[float | None] = mapped_column(Float)
    speedup: Mapped[float | None] = mapped_column(Float)
    equal_loss_rounds: Mapped[int | None] = mapped_column(Integer)  # rev. 0021
    equal_loss_ms_per_token: Mapped[float | None] = mapped_column(Float)  # rev. 0021
    mean_exit_round: Mapped[float | None] = mapped_column(Float)
    mean_step_rounds: Mapped[float | None] = mapped_column(Float)
    kv_mib: Mapped[float | None] = mapped_column(Float)
    kv_mib_needed: Mapped[float | None] = mapped_column(Float)
    device: Mapped[str | None] = mapped_column(String(64))
    concurrent_jobs: Mapped[int | None] = mapped_column(Integer)  # as decode_benches


class JobLog(Base):
    """Log lines and tracebacks a worker sent back (`looplab logs JOB`)."""

    __tablename__ = "job_logs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int | None] = mapped_column(Integer)
    ts: Mapped[float] = mapped_column(Float)
    level: Mapped[str] = mapped_column(String(16), default="INFO")
    message: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_job_logs_job_id_ts", "job_id", "ts"),)


class HealthEvent(Base):
    """A health rule's finding (orchestrator/health.py): the job, the attempt, the step, the figure and
    the rule; `level` warning (the run went on) or error (it ended the attempt). `value` is the figure
    as a number (NULL when it is not finite: SQLite stores NaN as NULL anyway), `figure` as text
    ("nan", "inf", "12.5"), so a non-finite one is still shown as what it was."""

    __tablename__ = "health_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int | None] = mapped_column(Integer)
    ts: Mapped[float] = mapped_column(Float)
    step: Mapped[int | None] = mapped_column(BigInteger)
    rule: Mapped[str] = mapped_column(String(32))  # an orchestrator.health.Rule value
    level: Mapped[str] = mapped_column(String(16))  # an orchestrator.health.Level value
    key: Mapped[str | None] = mapped_column(String(100))
    value: Mapped[float | None] = mapped_column(Float)
    figure: Mapped[str | None] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text)

    __table_args__ = (Index("ix_health_events_ts", "ts"), Index("ix_health_events_job_id", "job_id"))


class AlertOutbox(Base):
    """One alert for one channel (orchestrator/alerts.py): written in the transaction of what caused it,
    delivered at least once by a background thread. `msg_id` is the message's stable id (the same for
    every channel; a receiver drops repeats by it); `repeats` counts the events grouped into it (one
    message per job and rule per window). `status` pending | delivered; `tries`, `last_error` and
    `next_try_at` record failed deliveries (retried with backoff). No secret is ever stored here: a
    channel is known by its name."""

    __tablename__ = "alert_outbox"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    msg_id: Mapped[str] = mapped_column(String(64))
    channel: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Float)
    topic: Mapped[str] = mapped_column(String(32))  # health | job_failed | queue_done | paused | test
    job_id: Mapped[int | None] = mapped_column(Integer)
    rule: Mapped[str | None] = mapped_column(String(32))
    subject: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    repeats: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    tries: Mapped[int] = mapped_column(Integer, default=0)
    next_try_at: Mapped[float] = mapped_column(Float)
    delivered_at: Mapped[float | None] = mapped_column(Float)
    last_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("msg_id", "channel"),
        Index("ix_alert_outbox_status_next_try_at", "status", "next_try_at"),
    )


class Rewind(Base):
    """A loss spike the trainer rewound (the spec's spike rule set to rewind; workers/train/trainer.py): the
    n-th rewind of the job, under which attempt, the checkpoint step it went back to (`step`), the step
    that spiked and the data rows skipped from then on (global row indices, a JSON list: what a reader
    lists, what a rerun skips again). A rerun or a resume that meets the same spike rewinds again with
    the same n: the row is the same and is written again."""

    __tablename__ = "rewinds"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    n: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int | None] = mapped_column(Integer)
    ts: Mapped[float] = mapped_column(Float)
    step: Mapped[int] = mapped_column(BigInteger)
    spiked_step: Mapped[int] = mapped_column(BigInteger)
    rows: Mapped[str] = mapped_column(Text)


class SupersededPoint(Base):
    """A curve point a rewind superseded: the steps after the checkpoint it went back to, as first
    trained (before the skipped rows). Stored so the spike can be seen (drawn faint on the Runs page);
    never a run's curve: every comparison, average and export reads `metrics`, where each step has one
    live point. `rewind` is the `rewinds.n` that superseded it."""

    __tablename__ = "superseded_points"
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    rewind: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    tokens: Mapped[int | None] = mapped_column(BigInteger)
    wall_s: Mapped[float | None] = mapped_column(Float)
    value: Mapped[float] = mapped_column(Float)


class DatabaseIdentity(Base):
    """The database's own identity: one row (id 1), a random UUID written at its first use
    (orchestrator/alerts.py `database_identity`). Alert ids are made from it, so two databases never
    share one (revision 0022)."""

    __tablename__ = "database_identity"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    uuid: Mapped[str] = mapped_column(String(36))
    created_at: Mapped[float] = mapped_column(Float)


class Audit(Base):
    """Who did what to which job or grid (rev. 0024): written by database triggers only
    (orchestrator/owners.py reads it), so an action in plain SQL is recorded like one through looplab."""

    __tablename__ = "audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[float] = mapped_column(Float)
    actor: Mapped[str | None] = mapped_column(String(63))
    action: Mapped[str] = mapped_column(String(16))  # grid | submit | cancel | retry | priority | preempt
    job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    grid_id: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[str | None] = mapped_column(Text)


class LocalUser(Base):
    """SQLite only: the operating-system user that the audit triggers record (one row, id 1, written
    when looplab opens the file; a SQLite file is a single-user database). Unused on PostgreSQL."""

    __tablename__ = "local_user"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(63))


def _result_tables() -> dict[str, type[Base]]:
    """The result tables the job kinds declare (workers.jobs.KINDS), by name, mapped to their ORM
    classes; a declared name with no class here is refused at import."""
    orm = {mapper.class_.__tablename__: mapper.class_ for mapper in Base.registry.mappers}
    missing = [name for name in result_tables() if name not in orm]
    if missing:
        raise RuntimeError(f"job kinds declare result tables that orchestrator/schema.py lacks: {missing}")
    return {name: orm[name] for name in result_tables()}


# Result tables a worker may fill through `Reporter.result(table, row)`.
RESULT_TABLES = _result_tables()
