"""The `looplab` command handlers of the orchestrator (declared in lab/cli.py).

Each takes the argparse Namespace and returns an exit code. They are thin: the work lives in
lab.api / jobqueue / scheduler, so the Python API and the CLI behave the same.
"""

from __future__ import annotations

import runpy
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from looplab.model.errors import ConfigError
from looplab.names import legacy_imports
from looplab.orchestrator.states import ACTIVE, DEAD_ENDS, JobStatus


def _queue(args, artifacts: str | None = None):
    from looplab.lab.api import Queue

    return Queue(db=args.db, artifacts=artifacts)


def load_grids(path: str) -> list:
    """The grids a submission file defines: its GRIDS list if it has one, else every module-level Grid.
    A syntax error is one line naming the file and line (ConfigError), not a traceback."""
    from looplab.orchestrator.grid import Grid

    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"submit: no such file {path!r}")
    try:
        with legacy_imports(str(file)):
            ns = runpy.run_path(str(file), run_name="looplab_submission")
    except SyntaxError as e:
        where = f"{e.filename or path}:{e.lineno}" + (f":{e.offset}" if e.offset else "")
        raise ConfigError(f"{where}: syntax error: {e.msg}") from None
    if "GRIDS" in ns:
        grids = list(ns["GRIDS"])
    else:
        grids = [v for k, v in ns.items() if isinstance(v, Grid) and not k.startswith("_")]
    if not grids:
        raise ConfigError(f"submit: {path} defines no Grid (module-level Grid objects or a GRIDS list)")
    bad = [g for g in grids if not isinstance(g, Grid)]
    if bad:
        raise ConfigError(f"submit: GRIDS holds {type(bad[0]).__name__}, expected Grid objects")
    return grids


@contextmanager
def beside_grid_file(path: str):
    """While a grid file is loaded and its grids validated: the file's directory first on sys.path, so
    a family module beside it (`family: "my_family:factory"`) imports as it does for `python grids.py`.
    Only this process sees it: a job stores the family's name, and the workers of `looplab run` import
    it by that name, so a module imported from here is named on stderr with what the workers need."""
    directory = str(Path(path).resolve().parent)
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    before = set(sys.modules)
    try:
        yield
    finally:
        if added:
            sys.path.remove(directory)
        local = sorted(
            name
            for name in set(sys.modules) - before
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(directory + "/")
        )
        if local and added:
            print(
                f"looplab: {', '.join(local)} imported from {directory} (beside the grid file); the workers "
                f"of `looplab run` import it by name: start it with PYTHONPATH={directory}, or install it",
                file=sys.stderr,
            )


def cli_submit(args) -> int:
    import pandas as pd

    with beside_grid_file(args.file):
        grids = load_grids(args.file)  # before the queue: a file that does not load creates nothing
        q = _queue(args)
        ids = q.submit(grids)
    added = set(q.last_added)
    print(
        f"{len(grids)} grid(s), {len(ids)} job(s): {len(added)} added, {len(ids) - len(added)} already present"
    )
    df = q.status()
    df = df[df["id"].isin(ids)]
    for r in df.itertuples():
        seed = "" if pd.isna(r.seed) else f"seed {r.seed}"  # a decode bench has none (pd.NA: no bool)
        what = " ".join(str(x) for x in (r.recipe, r.size, seed) if x and str(x) != "nan")
        print(
            f"  {'added  ' if r.id in added else 'present'} job {r.id:>4} {str(r.grid):<14} {r.kind:<12} "
            f"{what:<28} {r.status}"
        )
    return 0


def _check_slots(args) -> None:
    """--num-cpus >= 1 and --num-gpus >= 0 of `plan` and `status` (ConfigError naming the flag)."""
    from looplab.model import fields

    if args.num_cpus is not None:
        fields.integer("--num-cpus", args.num_cpus, lo=1)
    if args.num_gpus is not None:
        fields.number("--num-gpus", args.num_gpus, lo=0)


def cli_plan(args) -> int:
    _check_slots(args)
    target = plan_target(args)
    with beside_grid_file(args.file), _plan_queue(args) as q:
        grids = load_grids(args.file)
        if target is not None:
            report = q.plan(
                grids, num_cpus=args.num_cpus, num_gpus=args.num_gpus, calibration=target, elsewhere=True
            )
        else:
            how = "cached" if args.no_calibrate else "fresh" if args.recalibrate else "auto"
            if how != "cached":
                print("calibrating this machine (about 15 s; cached for a week) ...", flush=True)
            report = q.plan(grids, num_cpus=args.num_cpus, num_gpus=args.num_gpus, calibration=how)
    print(report.frame().to_csv(index=False) if args.csv else report.text(wide=args.wide))
    return 0


@contextmanager
def _plan_queue(args):
    """The queue `looplab plan` prices behind: the database's, or, where its SQLite file does not exist
    yet, an empty one in a temporary directory, so planning before the first submit creates nothing."""
    from looplab.lab.api import Queue
    from looplab.orchestrator.db import sqlite_file

    file = sqlite_file(args.db)
    if file is None or file.exists():
        yield _queue(args)
        return
    print(
        f"no database at {file} yet: priced as the first grids of an empty queue (nothing created)",
        file=sys.stderr,  # --csv output stays CSV
    )
    with tempfile.TemporaryDirectory() as tmp:
        q = Queue(db=Path(tmp) / "plan.db")
        try:
            yield q
        finally:
            q.eng.dispose()  # the file goes with the directory: no connection may hold it


def plan_target(args):
    """The Calibration of the machine `looplab plan` prices for: --calibration FILE (written there by
    `looplab calibrate`) or --device NAME of the table with --mfu; None for this machine."""
    from looplab.workers import calibrate

    if args.mfu is not None and args.device is None:
        raise ConfigError("--mfu: only with --device (a calibration file has its own rates)")
    if args.calibration is not None:
        return calibrate.read_file(args.calibration)
    if args.device is not None:
        return calibrate.for_device(args.device, args.mfu, 1 if args.num_gpus is None else args.num_gpus)
    return None


def cli_gc(args) -> int:
    """Apply the retention rule to succeeded jobs (orchestrator/retention.py) and say what it freed."""
    from looplab.orchestrator import retention

    q = _queue(args)
    done = retention.gc(q.eng, grid=args.grid, dry_run=args.dry_run)
    verb = "would free" if args.dry_run else "freed"
    for job_id, freed in done.freed.items():
        print(f"  job {job_id:>5}: {verb} {retention.fmt_bytes(freed)}")
    total = f"{retention.fmt_bytes(done.total)} ({done.total:,} bytes) in {len(done.freed)} job(s)"
    kept = len(done.kept_all)
    print(
        f"gc: {verb} {total}"
        + (f"; {kept} succeeded job(s) of grids with retention 'all' left as they are" if kept else "")
    )
    return 0


def cli_run(args) -> int:
    from looplab.lab.display import print_progress
    from looplab.orchestrator import ray_watch, release
    from looplab.orchestrator.db import display_url
    from looplab.orchestrator.scheduler import Scheduler

    release_on = release.parse(args.release_on)  # refused before anything starts
    release.early(release_on)
    q = _queue(args, artifacts=args.artifacts)
    print(f"looplab run: database {display_url(q.url)}, artifacts {q.artifacts.absolute()}", flush=True)
    try:
        code = Scheduler(
            q.eng,
            q.artifacts,
            address=args.address,
            num_cpus=args.num_cpus,
            num_gpus=args.num_gpus,
            until_empty=args.until_empty,
            max_concurrent=args.max_concurrent,
            live_view=print_progress,
            release_on=release_on,
        ).run()
    finally:
        release.ignore(release_on)
    if code == ray_watch.EXIT_RAY_LOST:  # its jobs released; Ray's shutdown at exit would wait for the
        ray_watch.leave(code)  # head it lost (it hung past 60 s on the test cluster)
    return code


def cli_status(args) -> int:
    from looplab.lab.display import last_grids, status_frame, table
    from looplab.orchestrator.db import display_url

    _check_slots(args)
    q = _queue(args)
    if getattr(args, "since", None):
        print(since_text(q.eng, args.since, args.local))
        return 0
    if getattr(args, "audit", False):
        from looplab.orchestrator.owners import audit_text

        print(audit_text(q.eng))
        return 0
    while True:
        df = status_frame(q.eng, grid=args.grid, all_jobs=args.all)
        if df.empty and not args.all and args.grid is None:  # a finished queue: what became of it
            text = last_grids(q.eng)
        else:
            text = table(df)
            if not args.all:
                text += "\n(queued and running jobs; --all shows finished ones too)"
            text += "\n" + queue_eta(q.eng, args.num_cpus, args.num_gpus)
        if not args.watch:
            print(text)
            return 0
        print("\033[2J\033[H" + time.strftime("%H:%M:%S  ") + display_url(q.url) + "\n" + text, flush=True)
        time.sleep(3)


def clock(t: float | None, local: bool = False, fmt: str = "%m-%d %H:%M:%S") -> str:
    """Epoch seconds as a time with its zone: UTC by default (one zone for every reader of a shared
    queue), the machine's local zone on request; "" for none."""
    if t is None or t != t:
        return ""
    return (
        time.strftime(f"{fmt} %Z", time.localtime(t))
        if local
        else time.strftime(f"{fmt} UTC", time.gmtime(t))
    )


def since_text(eng, since: str, local: bool = False) -> str:
    """The morning view in text (`looplab status --since`): counts, finished jobs, findings, alerts
    (pending ones first), times in UTC (`local`: the local zone)."""
    from looplab.orchestrator.health_view import happened_since, parse_since, with_links

    at = parse_since(since)
    seen = with_links(happened_since(eng, at))  # each job's run on the dashboard ($LOOPLAB_DASHBOARD_URL)
    head = f"since {clock(at, local, '%Y-%m-%d %H:%M')}: " + ", ".join(
        f"{n} {what}" for what, n in seen["counts"].items()
    )
    parts = [head]
    for name, title in (("alerts", "alerts"), ("finished", "finished jobs"), ("health", "health events")):
        df = seen[name]
        for col in ("finished_at", "seen_at", "created_at", "delivered_at"):
            if col in df:
                df[col] = df[col].map(lambda t: clock(t, local))
        parts.append(f"\n{title}:\n" + (df.to_string(index=False, max_colwidth=90) if len(df) else "  none"))
        if name == "alerts" and seen["counts"]["alerts pending"]:  # first, and in red on a terminal
            line = f"{seen['counts']['alerts pending']} alert(s) pending: `looplab alerts --send` delivers them now"
            parts[-1] = ("\033[1;31m" + line + "\033[0m" if sys.stdout.isatty() else line) + "\n" + parts[-1]
    return "\n".join(parts)


def cli_alerts(args) -> int:
    """`looplab alerts`: the health events and alert deliveries since --since; `looplab alerts test`:
    one message to every configured channel, delivered now, with each channel's outcome."""
    from looplab.orchestrator import alerts

    q = _queue(args)
    if args.action == "list" and not args.send:
        print(since_text(q.eng, args.since, args.local))
        return 0
    cfg = alerts.load()
    if not cfg.channels:
        print("no alert channels configured: see docs/health.md (LOOPLAB_ALERTS or LOOPLAB_ALERT_*)")
        return 1
    if args.send:
        return send_pending(q.eng, cfg, args.wait)
    msg = alerts.notify(
        q.eng,
        cfg,
        alerts.Topic.TEST,
        "test alert",
        "a test message from `looplab alerts test`",
        group=f"test:{time.time()}",
        level="error",
    )
    alerts.deliver_due(q.eng, cfg)
    import sqlalchemy as sa

    with q.eng.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT channel, status, last_error FROM alert_outbox WHERE msg_id = :m ORDER BY id"),
            {"m": msg},
        ).all()
    for channel, status, error in rows:
        print(f"{channel}: {status}" + (f" ({error})" if status != "delivered" else ""))
    return 0 if all(status == "delivered" for _, status, _ in rows) else 1


def send_pending(eng, cfg, wait_s: float | None) -> int:
    """`looplab alerts --send`: deliver what is pending within `wait_s` (default the config's flush_s),
    say what went and what is left; exit 1 when something is left."""
    from looplab.model import fields
    from looplab.orchestrator import alerts

    wait = cfg.flush_s if wait_s is None else fields.number("--wait", wait_s, lo=0)
    before = len(alerts.pending(eng))
    got = alerts.flush(eng, cfg, wait)
    print(f"{got['delivered']} of {before} pending alert(s) delivered ({got['failed']} failed tries)")
    for line in alerts.say_left(eng):
        print(line)
    return 1 if got["left"] else 0


def queue_eta(eng, num_cpus: int | None = None, num_gpus: float | None = None) -> str:
    """One line: the queue's estimated finish time (lab.planner, from the stored estimates)."""
    from looplab.lab.display import fmt_eta
    from looplab.lab.planner import forecast_queue

    report = forecast_queue(eng, num_cpus=num_cpus, num_gpus=num_gpus)
    left = [j for j in report.jobs if j.status in ACTIVE]
    if not left:
        return "queue empty"
    unknown = sum(j.remaining_s is None for j in left)
    finish = time.strftime("%H:%M", time.localtime(report.finish_at))
    line = (
        f"queue: {len(left)} job(s) left, estimated finish in {fmt_eta(report.makespan_s) or '0s'}"
        f"{' at the earliest' if unknown else ''} ({finish}) on {report.cpus:g} CPU(s), {report.gpus:g} GPU(s)"
    )
    return line + (f"; {unknown} job(s) without an estimate" if unknown else "")


def _report(done: list[int], asked: list[int], verb: str, why_not: str) -> int:
    missed = sorted(set(asked) - set(done))
    print(f"{verb}: {done or 'none'}" + (f"; {why_not} (left as they are): {missed}" if missed else ""))
    return 0 if done else 1


def cli_cancel(args) -> int:
    done = _queue(args).cancel(args.job_ids)  # the active jobs
    return _report(done, args.job_ids, JobStatus.CANCELLED, f"not {'/'.join(ACTIVE)}")


def cli_retry(args) -> int:
    done = _queue(args).retry(args.job_ids)  # the dead ends, once their attempt has stopped
    return _report(done, args.job_ids, "re-queued", f"not {'/'.join(DEAD_ENDS)}, or still stopping")


def cli_priority(args) -> int:
    done = _queue(args).set_priority(args.job_ids, args.priority)
    return _report(
        done, args.job_ids, f"priority {args.priority}", f"not {'/'.join(ACTIVE)}, or already at it"
    )


def cli_logs(args) -> int:
    import sqlalchemy as sa

    from looplab.orchestrator.schema import Job

    q = _queue(args)
    with q.eng.connect() as conn:
        job = conn.execute(sa.select(Job.__table__).where(Job.id == args.job_id)).first()
    if job is None:
        raise ConfigError(f"logs: no job {args.job_id}")
    print(
        f"job {job.id} {job.kind} {job.status} (attempts {job.attempts}/{job.max_attempts}) "
        f"artifacts {job.artifact_dir or '-'}"
    )
    for r in q.rewinds(args.job_id).itertuples():
        print(
            f"rewind {r.n} [attempt {r.attempt}]: loss spike at step {r.spiked_step}, back to step {r.step}, "
            f"skipped data rows {', '.join(str(i) for i in r.rows)}"
        )
    df = q.logs(args.job_id).tail(args.tail)
    for r in df.itertuples():
        stamp = time.strftime("%H:%M:%S", time.localtime(r.ts))
        print(f"{stamp} [attempt {r.attempt}] {r.level}: {r.message.rstrip()}")
    if job.error and (df.empty or job.error.strip() not in df["message"].iloc[-1]):
        print(f"error:\n{job.error.rstrip()}")
    return 0


def cli_demo(args) -> int:
    from looplab.lab.demo import main

    if args.study == "iso-depth":
        from looplab.lab.demo import main_iso_depth

        return main_iso_depth(db=args.db, fast=args.fast, artifacts=args.artifacts or "looplab_artifacts")
    if args.study == "loop-design":
        from looplab.lab.demo import main_loop_design

        return main_loop_design(db=args.db, fast=args.fast, artifacts=args.artifacts or "looplab_artifacts")
    if args.study == "adaptive":
        from looplab.lab.demo import main_adaptive

        return main_adaptive(db=args.db, fast=args.fast, artifacts=args.artifacts or "looplab_artifacts")
    if args.study == "families":
        from looplab.lab.demo_families import main_families

        return main_families(db=args.db, fast=args.fast, artifacts=args.artifacts or "looplab_artifacts")
    if args.study == "learned-exits":
        from looplab.lab.demo import main_adaptive

        return main_adaptive(
            db=args.db, fast=args.fast, artifacts=args.artifacts or "looplab_artifacts", learned=True
        )
    if args.study == "lean":
        from looplab.lab.demo import main_lean

        return main_lean(db=args.db, fast=args.fast, artifacts=args.artifacts or "looplab_artifacts")
    return main(db=args.db, fast=args.fast, artifacts=args.artifacts or "looplab_artifacts", wide=args.wide)


def cli_export_model(args) -> int:
    from looplab.workers.model_export import export_model

    out = export_model(args.checkpoint, args.out)
    print(f"exported {args.checkpoint} to {out} ({', '.join(sorted(p.name for p in out.iterdir()))})")
    return 0


def cli_lm_eval(args) -> int:
    """lm-evaluation-harness's own command line with the looplab model registered (`--model looplab`)."""
    import sys

    try:
        from lm_eval.__main__ import cli_evaluate

        import looplab.workers.evaluate.lm_eval_adapter  # noqa: F401 - registers the model with the harness
    except ImportError as e:
        raise ConfigError(
            f"lm-eval: lm-evaluation-harness is not installed (pip install -e .[eval]): {e}"
        ) from e
    argv = sys.argv
    sys.argv = ["lm-eval", *args.passed]  # the harness reads its arguments from sys.argv
    try:
        cli_evaluate()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = argv
    return 0


def cli_claims(args) -> int:
    """The three studies' claims judged on the database's finished runs (analysis/claims.py): a table
    that fits 120 columns (analysis/claims_text.py), or every column as CSV or JSON."""
    from looplab.analysis import claims_measure, claims_text, variants
    from looplab.orchestrator import frames
    from looplab.orchestrator.db import resolve_url

    url = resolve_url(args.db)
    runs = variants.with_variants(frames.runs(url))
    done = runs[runs["status"] == JobStatus.SUCCEEDED]
    iso, why = (
        claims_measure.iso_fit(done, where="this database")
        if args.study in (None, "iso-depth")
        else (None, "")
    )
    geometry = {"deltas": frames.round_deltas(url), "interactions": frames.round_interactions(url)}
    card = claims_measure.scorecard(done, frames.depth(url), args.study, iso=iso, iso_note=why, **geometry)
    if args.csv:
        print(card.to_csv(index=False), end="")
        return 0
    if args.json:
        print(card.to_json(orient="records", force_ascii=False, indent=1))
        return 0
    print(claims_text.text_scorecard(card))
    return 0
