"""`looplab` — the command line.

This file only declares the commands and their flags; each command's work lives next to what it
drives (`orchestrator.db`, `orchestrator.sql`, `lab.commands`, `dashboard.launch`) and is
imported lazily so `looplab --help` stays fast (no torch, no ray).

The database is chosen by `--db URL` (any SQLAlchemy URL, or a plain path to a SQLite file; before or
after the command), else the environment variable LOOPLAB_DB, else `sqlite:///looplab.db` in the
working directory. Only `submit`, `run`, `demo` and `db upgrade` create a SQLite database that is not
there; every command that reads one (`READS_EXISTING_DB`) says it is missing and creates nothing, so a
command typed in the wrong directory does not leave an empty looplab.db behind it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

HEADLINE = "looplab: a job queue and results database for looped language models"
# command -> (module, function); the function takes the parsed argparse.Namespace, returns an exit code
# handled by lab/commands.py
QUEUE_COMMANDS = (
    "submit",
    "plan",
    "run",
    "status",
    "cancel",
    "retry",
    "priority",
    "logs",
    "demo",
    "gc",
    "alerts",
)
HANDLERS = {
    "calibrate": ("looplab.workers.calibrate", "cli_calibrate"),  # needs only torch: runs on a bare GPU box
    "db": ("looplab.orchestrator.roles", "cli_db"),  # grant there, the other actions in orchestrator.db
    "sql": ("looplab.orchestrator.sql", "cli_sql"),
    **{command: ("looplab.lab.commands", f"cli_{command}") for command in QUEUE_COMMANDS},
    "fit": ("looplab.lab.fit", "cli_fit"),
    "claims": ("looplab.lab.commands", "cli_claims"),
    "report": ("looplab.lab.report", "cli_report"),
    "export": ("looplab.lab.export", "cli_export"),
    "dashboard": ("looplab.dashboard.launch", "cli_dashboard"),
    "export-model": ("looplab.lab.commands", "cli_export_model"),
    "lm-eval": ("looplab.lab.commands", "cli_lm_eval"),
    "family": ("looplab.lab.family", "cli_family"),
    "slurm": ("looplab.lab.slurm", "cli_slurm"),
    "cluster-config": ("looplab.lab.cluster_configs", "cli_cluster_config"),
}
# commands that read the database and must not create it: in the wrong directory they say so instead
READS_EXISTING_DB = (
    "status",
    "cancel",
    "retry",
    "priority",
    "logs",
    "alerts",
    "gc",
    "sql",
    "fit",
    "report",
    "export",
    "dashboard",
)
DB_HELP = "database URL or SQLite path (default: $LOOPLAB_DB or sqlite:///looplab.db)"
# the command whose arguments are another program's (lm-evaluation-harness): passed through unparsed
PASS_THROUGH = "lm-eval"


# command -> the guide (under docs/ in the repository) that `looplab COMMAND --help` names
GUIDES = {
    "db": "docs/queue.md (the database, read-only SQL); PostgreSQL and grant-reader: docs/scale-out.md; grant: docs/lab.md",
    "sql": "docs/queue.md (read-only SQL, the views)",
    "submit": "docs/variants.md (recipes, variants, sweeps, budgets); data, max_tokens: docs/data.md; the tour: README.md",
    "plan": "docs/planning.md (also for a device you are not on: --calibration, --device); disk: docs/disk.md",
    "calibrate": "docs/planning.md (Planning for a device you are not on)",
    "gc": "docs/disk.md (what a finished run keeps)",
    "export-model": "docs/published-models.md (Exporting a model)",
    "lm-eval": "docs/published-models.md (lm-evaluation-harness from the shell)",
    "run": "docs/queue.md (which job starts, stopping and resuming); several GPUs or nodes: docs/scale-out.md",
    "status": "docs/queue.md; the estimated finish: docs/planning.md; --since: docs/health.md; --audit: docs/lab.md",
    "cancel": "docs/queue.md",
    "retry": "docs/queue.md",
    "priority": "docs/queue.md; owners, roles and the audit trail: docs/lab.md",
    "logs": "docs/queue.md",
    "alerts": "docs/health.md (the rules, their defaults, the alert channels)",
    "demo": "docs/studies.md; --study adaptive: docs/adaptive.md; --study lean: docs/exports.md",
    "export": "docs/exports.md (Exporting runs)",
    "report": "docs/exports.md (Study reports)",
    "fit": "docs/studies.md (Study 2: iso-depth scaling laws)",
    "claims": "docs/claims.md (the registry, the rule, the scale marking)",
    "family": "docs/own-model.md (the contract, each capability and its fallback)",
    "dashboard": "docs/statistics.md (the verdicts and intervals); the study pages: docs/studies.md; for a lab: docs/lab.md",
    "slurm": "docs/scale-out.md (A study on SLURM: time limits, follow-ons, what is tested)",
    "cluster-config": "docs/scale-out.md (Ray's cluster launcher and KubeRay: what is checked)",
}
EPILOG = (
    "Guides: README.md (start here), docs/queue.md, docs/variants.md, docs/planning.md, "
    "docs/statistics.md, docs/studies.md, docs/evaluation.md, docs/scale-out.md, docs/measured.md, "
    "docs/gpu.md, docs/testing.md, docs/disk.md, docs/scale-training.md, docs/published-models.md, docs/own-model.md, docs/adaptive.md, docs/exports.md, docs/data.md, docs/claims.md, docs/health.md, docs/lab.md. `looplab COMMAND --help` names the guide of a command."
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="looplab", description=HEADLINE, epilog=EPILOG)
    p.add_argument("--db", default=None, help=DB_HELP)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    # in the order `looplab --help` lists them
    _database_commands(sub)
    _grid_commands(sub)
    _queue_commands(sub)
    _study_commands(sub)
    _model_commands(sub)
    for name, command in sub.choices.items():
        command.epilog = f"guide: {GUIDES[name]}"
        if name != PASS_THROUGH:  # --db and -v after the command too (SUPPRESS: the global one stays)
            command.add_argument("--db", default=argparse.SUPPRESS, help=DB_HELP)
            command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS)
    return p


def require_database(args) -> None:
    """Raise ConfigError when a command of READS_EXISTING_DB (or `db current`) would read a SQLite file
    that is not there: opening it would create an empty database and report an empty queue."""
    from looplab.model.errors import ConfigError
    from looplab.orchestrator.db import sqlite_file

    reads = args.command in READS_EXISTING_DB or (args.command == "db" and args.action == "current")
    file = sqlite_file(args.db) if reads else None
    if file is not None and not file.exists():
        raise ConfigError(
            f"no database at {file} (nothing created): run this in the directory that holds looplab.db, "
            "or point --db or $LOOPLAB_DB at it; `looplab submit` or `looplab run` create a new one"
        )


def quiet_broken_pipe() -> int:
    """A reader closed our output (`looplab sql --csv | head`): stop quietly, as a Unix tool does.
    stdout is pointed at /dev/null so the interpreter's last flush raises nothing either."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # a stdout without a file descriptor (tests)
        pass
    return 141  # 128 + SIGPIPE, what a shell reports for a tool that stopped on a closed pipe


def _database_commands(sub: argparse._SubParsersAction) -> None:
    """db and sql: the schema and read-only queries."""
    db = sub.add_parser(
        "db", help="database schema: upgrade, current; grant ROLE --as KIND, grant-reader ROLE (PostgreSQL)"
    )
    db.add_argument("action", choices=["upgrade", "current", "grant", "grant-reader"])
    db.add_argument(
        "role",
        nargs="?",
        default=None,
        help="grant / grant-reader: the PostgreSQL login role to create or change",
    )
    db.add_argument(
        "--as",
        dest="grant_as",
        choices=["reader", "member", "admin", "driver", "dashboard"],
        default=None,
        help="grant: what the role may do (default member; orchestrator/roles.py)",
    )

    sql = sub.add_parser("sql", help="run a read-only SQL query and print the result")
    sql.add_argument("query", help='e.g. "SELECT recipe, final_val_loss FROM runs"')
    sql.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop the query after this many seconds (default 10)",
    )
    fmt = sql.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="print CSV")
    fmt.add_argument("--json", action="store_true", help="print JSON lines")


def _grid_commands(sub: argparse._SubParsersAction) -> None:
    """submit, plan and calibrate: a grid file into the queue, or priced before it goes there."""
    from looplab.workers.calibrate import (  # standard library only: --help stays fast
        DEFAULT_MFU,
        add_arguments,
    )

    sm = sub.add_parser("submit", help="submit the grids defined in a Python file")
    sm.add_argument("file", help="a .py file defining Grid objects (module-level names or a GRIDS list)")

    pl = sub.add_parser(
        "plan", help="estimate time, FLOPs and memory of a grid file's jobs (submits nothing)"
    )
    pl.add_argument("file", help="a .py file defining Grid objects, as for submit")
    _resource_flags(pl, "the queue runs on (default: this machine's)")
    how = pl.add_mutually_exclusive_group()
    how.add_argument(
        "--no-calibrate",
        action="store_true",
        help="never measure this machine (use a cached calibration, if any)",
    )
    how.add_argument(
        "--recalibrate",
        action="store_true",
        help="measure this machine now (about 15 s), replacing the cached calibration",
    )
    how.add_argument(
        "--calibration",
        default=None,
        metavar="FILE",
        help="price for the machine that wrote FILE (looplab calibrate --out FILE there)",
    )
    how.add_argument(
        "--device",
        default=None,
        metavar="NAME",
        help="price for a GPU of the device table: h100, h100_pcie, h100_nvl, h200, a100, a100_40gb, l40s, rtx5090, ...",
    )
    pl.add_argument(
        "--mfu",
        type=float,
        default=None,
        help=f"with --device: the MFU training reaches (default {DEFAULT_MFU})",
    )
    pl.add_argument("--csv", action="store_true", help="print the per-job table as CSV (every field)")
    pl.add_argument(
        "--wide", action="store_true", help="every column (disk, kept, start) on one line per job"
    )

    add_arguments(
        sub.add_parser(
            "calibrate", help="measure this machine's device for planning elsewhere (needs only torch)"
        )
    )


def _queue_commands(sub: argparse._SubParsersAction) -> None:
    """gc, run, status, cancel, retry and logs: the queue and its jobs."""
    gc = sub.add_parser("gc", help="delete the resume state (checkpoints) of succeeded jobs, keep final.pt")
    gc.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")
    gc.add_argument("--grid", default=None, help="only this grid's jobs (name or id)")

    run = sub.add_parser("run", help="run the queue (the scheduler driver)")
    run.add_argument("--address", default=None, help="Ray cluster address (default: start a local Ray)")
    run.add_argument("--until-empty", action="store_true", help="exit when no job is left to run")
    _resource_flags(run, "for a local Ray instance")
    run.add_argument("--artifacts", default=None, help="artifact directory (default: ./looplab_artifacts)")
    run.add_argument("--max-concurrent", type=int, default=None, help="cap on jobs running at once")
    run.add_argument(
        "--release-on",
        default=None,
        metavar="SIGNALS",
        help="signals (e.g. USR1,TERM) that hand the queue back: every running job checkpoints and returns "
        "to the queue, the driver exits 0 (a batch system's time limit or preemption; see `looplab slurm`)",
    )
    _slurm_command(sub)
    _cluster_config_command(sub)

    st = sub.add_parser("status", help="jobs with progress and ETA")
    st.add_argument("--watch", action="store_true", help="refresh every few seconds")
    st.add_argument("--grid", default=None, help="only this grid (name or id)")
    st.add_argument("--all", action="store_true", help="show finished jobs too")
    _resource_flags(st, "for the finish-time estimate")
    st.add_argument(
        "--since",
        default=None,
        metavar="TIME",
        help="what happened since TIME (8h, 90m, 07:30, 2026-12-03 18:00): finished, failed, stalled, "
        "warned, alerts and their delivery",
    )
    st.add_argument(
        "--local", action="store_true", help="with --since: times in the local zone (default UTC)"
    )

    st.add_argument(
        "--audit", action="store_true", help="who submitted, cancelled, retried, re-prioritised, preempted"
    )

    for name, helptext in (("cancel", "cancel jobs"), ("retry", "re-queue failed or cancelled jobs")):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("job_ids", nargs="+", type=int, metavar="JOB")
    pr = sub.add_parser("priority", help="change the priority of queued or running jobs")
    pr.add_argument("job_ids", nargs="+", type=int, metavar="JOB")
    pr.add_argument(
        "--to", dest="priority", type=int, required=True, help="the new priority (higher runs first)"
    )

    al = sub.add_parser(
        "alerts", help="health events and alert deliveries; `alerts test` sends one to every channel"
    )
    al.add_argument("action", nargs="?", choices=("list", "test"), default="list")
    al.add_argument(
        "--since", default="24h", metavar="TIME", help="since TIME (default 24h; as status --since)"
    )
    al.add_argument("--local", action="store_true", help="times in the local zone (default UTC)")
    al.add_argument(
        "--send",
        action="store_true",
        help="deliver the pending alerts now (without running the queue), trying for at most --wait seconds",
    )
    al.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="S",
        help="with --send: give up after S seconds (default: the alert config's flush_s, 30)",
    )

    lg = sub.add_parser("logs", help="log lines and tracebacks of a job")
    lg.add_argument("job_id", type=int, metavar="JOB")
    lg.add_argument("-n", "--tail", type=int, default=200, help="last N lines (default 200)")


def _study_commands(sub: argparse._SubParsersAction) -> None:
    """demo, fit, report, export and dashboard: what the finished runs say."""

    dm = sub.add_parser("demo", help="submit and run the demo grid end to end")
    dm.add_argument("--fast", action="store_true", help="a smaller grid (for smoke tests)")
    dm.add_argument(
        "--study",
        choices=["iso-depth", "loop-design", "adaptive", "learned-exits", "lean", "families"],
        default=None,
        help="run a study instead, CPU-sized: iso-depth = the iso-depth scaling law; "
        "loop-design = loop layouts, injections, history and timestep variants with "
        "depth sweeps (page Extrapolation); adaptive = per-token exit rules and KV "
        "strategies against the fixed depth (page Adaptive); learned-exits = exit gates trained "
        "with the entropy, geometric and act objectives, judged with the post-hoc rules; lean = parcae, "
        "fixed4 and lean at ~1 M tokens with depth sweeps, its findings checked and a report written; "
        "families = parcae, the Huginn-, Ouro- and MoR-style families and the example family at equal "
        "data and equal training time, two seeds, with depth sweeps",
    )
    dm.add_argument("--artifacts", default=None, help="artifact directory (default: ./looplab_artifacts)")
    dm.add_argument(
        "--wide",
        action="store_true",
        help="the comparison tables with every column (default: within 120 columns)",
    )

    ft = sub.add_parser("fit", help="fit a study's scaling law to the finished runs and print it")
    ft.add_argument(
        "study", choices=["iso-depth"], help="iso-depth: L = E + A(N_once + r^phi N_rec)^-alpha + B D^-beta"
    )
    ft.add_argument("--grid", default=None, help="only this grid's runs (default: every iso_depth run)")
    ft.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples over runs (default 200)")
    ft.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default 0)")
    ft.add_argument(
        "--flops",
        type=float,
        default=None,
        help="budget of the compute-optimal answers (default: the largest budget of the runs)",
    )
    ft.add_argument(
        "--robust", default="linear", help="least-squares loss: linear, huber, soft_l1, cauchy, arctan"
    )
    ft.add_argument("--json", action="store_true", help="print JSON")

    cl = sub.add_parser("claims", help="the three studies' claims judged on the finished runs: a scorecard")
    cl.add_argument(
        "--study",
        choices=["lean", "iso-depth", "loop-design"],
        default=None,
        help="only this study's claims (default: all three)",
    )
    cl.add_argument("--csv", action="store_true", help="print the whole scorecard as CSV (every column)")
    cl.add_argument("--json", action="store_true", help="print the whole scorecard as JSON (every column)")

    _output_commands(sub)


def _output_commands(sub: argparse._SubParsersAction) -> None:
    """report, export and dashboard: the finished runs in a file, another tool or a browser."""
    from looplab.lab.export import Target  # only the names: --help stays fast

    rp = sub.add_parser("report", help="write a study report of grids: self-contained HTML or Markdown")
    rp.add_argument(
        "grids", nargs="+", metavar="GRID", help="grid names or ids (the demo: demo demo-isotime)"
    )
    rp.add_argument("-o", "--output", default=None, help="file to write (default: print to stdout)")
    rp.add_argument(
        "--format",
        choices=["html", "md"],
        default=None,
        help="html (charts as inline SVG) or md (tables, to paste into notes); default: from "
        "the file's suffix, else html",
    )

    ex = sub.add_parser(
        "export", help="export runs to MLflow, TensorBoard, W&B (offline) or Parquet; again: only what is new"
    )
    ex.add_argument("target", choices=[target.value for target in Target])
    ex.add_argument("-o", "--output", required=True, help="the target directory (MLflow: DIR/mlflow.db)")
    ex.add_argument(
        "--grid",
        action="append",
        default=None,
        metavar="NAME",
        help="only this grid (name or id; repeat for several; default: the whole database)",
    )
    ex.add_argument(
        "--follow",
        action="store_true",
        help="export again every --every seconds while the selection has queued or running jobs",
    )
    ex.add_argument(
        "--every", type=float, default=30.0, help="seconds between exports with --follow (default 30)"
    )

    da = sub.add_parser("dashboard", help="start the Streamlit dashboard on 127.0.0.1")
    da.add_argument("--port", type=int, default=8501)
    da.add_argument(
        "--address",
        default="127.0.0.1",
        help="the address to listen on (default 127.0.0.1); any other needs --auth proxy (docs/lab.md)",
    )
    da.add_argument(
        "--auth",
        choices=["none", "proxy"],
        default="none",
        help="proxy: only sessions that a signing-in proxy vouches for ($LOOPLAB_DASHBOARD_SECRET)",
    )


def _model_commands(sub: argparse._SubParsersAction) -> None:
    """family check, export-model and lm-eval: a model of one's own, a trained model for other tools."""
    fam = sub.add_parser(
        "family", help="a model family: `family check NAME` runs the contract's conformance check"
    )
    checks = fam.add_subparsers(dest="action", metavar="ACTION", required=True)
    ck = checks.add_parser(
        "check",
        help="build the family on the CPU at the smallest shapes and print its capabilities and fallbacks; "
        "exit 1 naming what is wrong when it breaks the contract",
    )
    ck.add_argument(
        "name", help='"package.module:factory", a name registered under looplab.models, or "looped"'
    )
    ck.add_argument(
        "--config", default=None, help="the family_config as a JSON object, e.g. '{\"d_model\": 32}'"
    )
    ck.add_argument(
        "--vocab-size", type=int, default=256, help="the vocabulary looplab would set (default 256)"
    )
    ck.add_argument(
        "--seq-len", type=int, default=32, help="the context length looplab would set (default 32)"
    )
    ck.add_argument("--loops", type=int, default=2, help="the loop count to price the FLOPs at (default 2)")
    ex = sub.add_parser(
        "export-model",
        help="write a checkpoint as a model directory (config.json, "
        "model.safetensors, tokenizer.json) that looplab, an import job and lm-eval read",
    )
    ex.add_argument("checkpoint", help="a train or import artifact dir, or a checkpoint file")
    ex.add_argument("-o", "--out", required=True, help="the directory to write (new or empty)")

    sub.add_parser(
        PASS_THROUGH,
        add_help=False,
        help="lm-evaluation-harness with looplab models registered: every argument is the harness's own, "
        "e.g. lm-eval --model looplab --model_args checkpoint=DIR,loops=8 --tasks sciq",
    )


def _study_where(parser: argparse.ArgumentParser) -> None:
    """What `looplab slurm` and `looplab cluster-config` both take: the grid file and the shared directory."""
    parser.add_argument("grids", metavar="FILE", help="the study's grid file (as for `looplab submit`)")
    parser.add_argument(
        "--artifacts", required=True, help="shared artifact directory: the same path on every machine"
    )


def _resource_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """--num-cpus and --num-gpus (whole CPUs, fractional GPUs), each helped as "CPUs/GPUs <what>";
    `lab/commands.py` checks their ranges."""
    parser.add_argument("--num-cpus", type=int, default=None, help=f"CPUs {what}")
    parser.add_argument("--num-gpus", type=float, default=None, help=f"GPUs {what}")


def _slurm_command(sub: argparse._SubParsersAction) -> None:
    sl = sub.add_parser(
        "slurm",
        help="write (--submit: and submit) an sbatch script that runs a study across SLURM allocations",
        description="Write an sbatch script for the grids of FILE: the allocation's first node runs the Ray "
        "head and the driver, the others join; SLURM's warning before the time limit (or a preemption) "
        "checkpoints every running job and hands it back; the script then submits its follow-on, which "
        "resumes every job from its checkpoint. The results database must be PostgreSQL (--db).",
    )
    _study_where(sl)
    sl.add_argument(
        "--time", required=True, help="each allocation's time limit (minutes, HH:MM:SS, D-HH:MM:SS)"
    )
    sl.add_argument(
        "--nodes", default="1", help="nodes per allocation: a count or a range MIN-MAX (default 1)"
    )
    sl.add_argument("--gpus-per-node", type=int, default=None, help="default: what a job of the grid asks")
    sl.add_argument("--cpus-per-task", type=int, default=None, help="CPUs per node (default: a job's ask)")
    sl.add_argument(
        "--signal-before", type=int, default=180, help="seconds before the limit SLURM warns (default 180)"
    )
    sl.add_argument("--partition", default=None)
    sl.add_argument("--account", default=None)
    sl.add_argument("--name", default=None, help="the study's name (default: the grid file's)")
    sl.add_argument("-o", "--output", default=None, help="the script's path (default looplab-NAME.sbatch)")
    sl.add_argument("--ray-port", type=int, default=6379, help="the Ray head's port (default 6379)")
    sl.add_argument("--head-wait", type=int, default=300, help="seconds a node polls for the Ray head")
    sl.add_argument("--submit", action="store_true", help="submit the script with sbatch")


def _cluster_config_command(sub: argparse._SubParsersAction) -> None:
    cc = sub.add_parser(
        "cluster-config",
        help="write a Ray cluster-launcher YAML (on-premises) or a KubeRay RayCluster manifest for a study",
        description="From the settings `looplab slurm` takes: --target ray writes a cluster-launcher YAML "
        "(provider local: the head and workers by address) for `ray up`; --target kuberay a RayCluster "
        "manifest for `kubectl apply`, the database URL from a Kubernetes secret. The results database "
        "must be PostgreSQL (--db), the artifact directory the same absolute path on every machine.",
    )
    _study_where(cc)
    cc.add_argument("--target", required=True, help="ray (cluster launcher) or kuberay (RayCluster)")
    cc.add_argument("--gpus-per-node", type=int, default=None, help="default: what a job of the grid asks")
    cc.add_argument("--cpus-per-node", type=int, default=None, help="default: what a job of the grid asks")
    cc.add_argument("--head-ip", default=None, help="ray: the head machine's address")
    cc.add_argument("--worker-ips", default=None, help="ray: the worker machines' addresses, comma-separated")
    cc.add_argument("--ssh-user", default=None, help="ray: the ssh user on every machine (default looplab)")
    cc.add_argument("--image", default=None, help="kuberay: a container image with looplab installed")
    cc.add_argument("--workers", type=int, default=1, help="kuberay: worker pods (default 1)")
    cc.add_argument(
        "--db-secret", default="looplab-db", help="kuberay: the secret holding the URL (key 'url')"
    )
    cc.add_argument(
        "--volume-claim", default="looplab-artifacts", help="kuberay: the artifacts' PVC (ReadWriteMany)"
    )
    cc.add_argument("--name", default=None, help="the study's name (default: the grid file's)")
    cc.add_argument("-o", "--output", default=None, help="the file's path (default NAME-cluster.yaml)")


def _split_pass_through(argv: list[str]) -> tuple[list[str], list[str]]:
    """(looplab's own arguments, the rest) when the command is PASS_THROUGH: everything after it belongs
    to the other program, `--help` included."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):  # looplab's global options
        i += 2 if argv[i] == "--db" else 1
    if i < len(argv) and argv[i] == PASS_THROUGH:
        return argv[: i + 1], argv[i + 1 :]
    return argv, []


def _working_directory_importable() -> None:
    """The `looplab` command imports modules of the directory it runs in, as `python -m looplab` does:
    a family in the user's own `model.py` (`"family": "model:factory"`) is found by the submitting
    process and the driver, and Ray gives the driver's sys.path to the workers it starts on this
    machine. Appended, not prepended: a user's file never shadows the standard library or looplab
    (which installs only the name `looplab`). Workers on other machines need the module installed or
    the same path there (docs/own-model.md)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def main(argv: list[str] | None = None) -> int:
    import logging

    own, passed = _split_pass_through(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(own)
    _working_directory_importable()
    args.passed = passed
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not args.verbose:  # Alembic narrates every migration step at INFO; a user needs none of it
        logging.getLogger("alembic").setLevel(logging.WARNING)
    module, func = HANDLERS[args.command]
    handler = getattr(importlib.import_module(module), func)
    try:
        require_database(args)
        return int(handler(args) or 0)
    except BrokenPipeError:
        return quiet_broken_pipe()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # user-facing: one clear line, not a traceback (use -v for that)
        from sqlalchemy.exc import DBAPIError

        from looplab.orchestrator.errors import USER_ERRORS

        if args.verbose:
            raise
        if isinstance(e, USER_ERRORS):
            print(f"looplab {args.command}: error: {e}", file=sys.stderr)
            return 2
        if isinstance(e, DBAPIError):  # the database failed: which one, what, and what to do
            from looplab.orchestrator.db import describe_error, resolve_url

            print(
                f"looplab {args.command}: error: {describe_error(e, resolve_url(args.db))}", file=sys.stderr
            )
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
