"""`looplab slurm`: a study on a SLURM cluster, across its allocations' time limits.

It writes (and with `--submit`, submits) one readable sbatch script. Each allocation of it:
  1. checks the shared artifact directory is the same directory on every node (a file the first node
     writes must be read back by all) before anything starts;
  2. starts the Ray head and the looplab driver on its first node; every other node joins as a Ray
     worker after polling the head's address (a bounded wait, never a fixed sleep);
  3. submits the study's grids (idempotent: a second allocation adds nothing) and runs the queue with
     `--release-on USR1,TERM` (orchestrator/release.py): SLURM's warning before the time limit
     (`--signal=B:USR1@SECONDS`) or a preemption's SIGTERM makes the driver ask every running job to
     checkpoint and stop, record it, and exit 0;
  4. when it was released with work left, submits its own follow-on (`sbatch --dependency=afterany:
     THIS_JOB`), whose driver takes the queue over: every job resumes from its checkpoint. When the
     queue is empty the chain ends.

What is refused, naming the option: a results database that is not PostgreSQL (a SQLite file on a
node-local path is seen by one node; every allocation may land elsewhere), no GPUs on a grid that asks
for them, a time limit not longer than one checkpoint interval of the grid's train jobs (ckpt_minutes)
plus the warning (the allocation would end before its first checkpoint: no progress, ever), a warning
too short for a step to finish.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
from pathlib import Path

from looplab.lab.slurm_script import SlurmSettings, render
from looplab.model import fields
from looplab.model.errors import ConfigError

# file systems every node of a cluster may see (a SQLite file there is at least visible; see refuse_db)
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "lustre", "gpfs", "beegfs", "cephfs", "ceph", "glusterfs")
TIME = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$")


def time_minutes(text: str) -> int:
    """SLURM's --time forms (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) as whole minutes, rounded up."""
    raw = str(text).strip()
    if not TIME.match(raw):
        raise ConfigError(
            f"--time: {text!r} is not a SLURM time; accepted: minutes, MM:SS, HH:MM:SS, D-HH:MM:SS"
        )
    days, rest = raw.split("-", 1) if "-" in raw else ("0", raw)
    parts = [int(x) for x in rest.split(":")]
    if "-" in raw:  # D-HH[:MM[:SS]]
        h, m, sec = (parts + [0, 0])[:3]
    else:  # MM, MM:SS, HH:MM:SS
        h, m, sec = [0, *parts, 0][:3] if len(parts) < 3 else parts
    seconds = int(days) * 86400 + h * 3600 + m * 60 + sec
    if seconds <= 0:
        raise ConfigError(f"--time: {text!r} is no time at all; give at least 1 minute")
    return math.ceil(seconds / 60)


def refuse_db(url: str) -> str:
    """The database URL every allocation's driver can reach, or ConfigError naming --db."""
    from sqlalchemy.engine import make_url

    from looplab.orchestrator.db import resolve_url, sqlite_file

    full = resolve_url(url)
    backend = make_url(full).get_backend_name()
    if backend == "postgresql":
        return full
    file = sqlite_file(full)
    if file is not None:
        fs = _fs_type(file.parent if not file.exists() else file)
        where = f"on a node-local path ({file}, a {fs} file system)" if fs not in NETWORK_FS else f"({file})"
        raise ConfigError(
            f"--db: a SQLite file {where} is not a database for SLURM: each allocation may land on other "
            "nodes and only one node writes a SQLite file safely; give a PostgreSQL URL every node's "
            "driver reaches, e.g. --db postgresql+psycopg://user:password@dbhost:5432/looplab"
        )
    raise ConfigError(f"--db: {backend} is not supported on SLURM; accepted: a PostgreSQL URL")


def _fs_type(path: Path) -> str:
    """The type of the file system that holds `path` (the longest mount point above it)."""
    path, best, kind = Path(os.path.realpath(path)), "", "unknown"
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        if (str(path) == mount or str(path).startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
            best, kind = mount, parts[2]
    return kind


def grid_needs(grids: list) -> tuple[int, int, float]:
    """(GPUs a job of the grids asks for at most, CPUs likewise, the longest checkpoint interval of
    their train jobs in minutes). Only GPUs a grid asks for explicitly count (its resources, or a train
    job's device "cuda"): looplab's default of one GPU per job on a GPU node is not a GPU grid."""
    from looplab.orchestrator import jobkinds

    gpus = cpus = 0.0
    ckpt = 0.0
    for grid in grids:
        res = grid.resources or {}
        for kind in (grid.job, *grid.then, *grid.follow):
            own = res.get(kind) if isinstance(res.get(kind), dict) else res
            asked = jobkinds.job_resources(kind, own, has_gpu=False)
            gpus = max(gpus, asked["num_gpus"] * asked["workers"])
            cpus = max(cpus, asked["num_cpus"] * asked["workers"])
        for config in grid.configs():
            if str(config.get("device", "")).startswith("cuda"):
                gpus = max(gpus, 1.0)
            if grid.job == "train":
                ckpt = max(ckpt, float(config.get("ckpt_minutes", 10.0)))
    return math.ceil(gpus), max(1, math.ceil(cpus)), ckpt


def settings(args, grids: list) -> SlurmSettings:
    """The options of `looplab slurm` checked against the grids; each refusal names its option."""
    db = refuse_db(args.db)
    gpus, cpus, ckpt_minutes = grid_needs(grids)
    minutes = time_minutes(args.time)
    before = fields.integer("--signal-before", args.signal_before, lo=10, hi=65535)
    if before >= minutes * 60:
        raise ConfigError(
            f"--signal-before: {before} s is not shorter than the time limit ({minutes} min): the warning "
            "would come before the allocation starts"
        )
    if minutes * 60 <= ckpt_minutes * 60 + before:
        raise ConfigError(
            f"--time: {minutes} min is not longer than one checkpoint interval of the grid's train jobs "
            f"(ckpt_minutes {ckpt_minutes:g}) plus the warning (--signal-before {before} s): an allocation "
            "could end before its first checkpoint and the study would never advance; give a longer --time "
            "or a smaller ckpt_minutes in the grid"
        )
    gpn = gpus if args.gpus_per_node is None else fields.integer("--gpus-per-node", args.gpus_per_node, lo=0)
    if gpus and gpn < gpus:
        raise ConfigError(
            f"--gpus-per-node: {gpn} GPU(s) per node, but a job of the grid asks for {gpus}: "
            f"give --gpus-per-node {gpus} or more (or no flag: the grid's own count)"
        )
    cpt = cpus if args.cpus_per_task is None else fields.integer("--cpus-per-task", args.cpus_per_task, lo=1)
    if cpt < cpus:
        raise ConfigError(
            f"--cpus-per-task: {cpt}, but a job of the grid asks for {cpus} CPUs; give {cpus} or more"
        )
    if not re.fullmatch(r"[1-9]\d*(-[1-9]\d*)?", args.nodes):
        raise ConfigError(f"--nodes: {args.nodes!r}; accepted: a count (2) or a range (1-4)")
    artifacts = Path(args.artifacts)
    if not artifacts.is_absolute():
        raise ConfigError(f"--artifacts: {args.artifacts!r} must be an absolute path, the same on every node")
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", args.name or Path(args.grids).stem)
    return SlurmSettings(
        name=name,
        grids=Path(args.grids).absolute(),
        db=db,
        artifacts=artifacts,
        time_minutes=minutes,
        nodes=args.nodes,
        cpus_per_task=cpt,
        gpus_per_node=gpn,
        signal_before_s=before,
        script=Path(args.output or f"looplab-{name}.sbatch").absolute(),
        partition=args.partition,
        account=args.account,
        ray_port=fields.integer("--ray-port", args.ray_port, lo=1024, hi=65535),
        head_wait_s=fields.integer("--head-wait", args.head_wait, lo=1),
    )


def cli_slurm(args) -> int:
    from looplab.lab.commands import beside_grid_file, load_grids

    with beside_grid_file(args.grids):
        grids = load_grids(args.grids)
    s = settings(args, grids)
    try:  # SLURM writes each allocation's output there (#SBATCH --output): it must exist beforehand
        (s.artifacts / "slurm").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--artifacts: cannot make {s.artifacts / 'slurm'} ({e})") from e
    s.script.write_text(render(s))
    s.script.chmod(0o700)  # it holds the database URL, password included: its owner only
    print(
        f"looplab slurm: wrote {s.script} ({len(grids)} grid(s); {s.nodes} node(s), {s.time_minutes} min each)"
    )
    if not args.submit:
        print(f"submit it with: sbatch {shlex.quote(str(s.script))}")
        return 0
    out = subprocess.run(["sbatch", "--parsable", str(s.script)], capture_output=True, text=True)
    if out.returncode != 0:
        raise ConfigError(f"--submit: sbatch refused the script: {out.stderr.strip() or out.stdout.strip()}")
    print(f"submitted SLURM job {out.stdout.strip().split(';')[0]}")
    return 0
