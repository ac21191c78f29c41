"""Alerts that reach a person: channels, a durable outbox in the database, delivery at least once.

Channels are configured once, for the person who runs the queue, never in a grid: a JSON file
($LOOPLAB_ALERTS, else ~/.config/looplab/alerts.json when it exists) of
`{"window_s": 3600, "channels": [{"name": .., "type": .., ...}, ...]}`, or environment variables for one
channel of each type (`LOOPLAB_ALERT_WEBHOOK`, `LOOPLAB_ALERT_SLACK`, `LOOPLAB_ALERT_COMMAND`,
`LOOPLAB_ALERT_SMTP` = host:port with `LOOPLAB_ALERT_EMAIL_TO` ...; see docs/health.md). Types:
- `webhook`: POST of the message as JSON (the generic shape: id, topic, subject, text, job, rule, ...),
  with the header `X-Looplab-Alert-Id` and, with a token, `Authorization: Bearer <token>`;
- `slack`: POST of `{"text": ...}` (Slack's incoming-webhook shape; the id closes the text);
- `smtp`: an e-mail (STARTTLS and login optional), its Message-ID made from the alert's id;
- `command`: a program run with the message JSON on stdin and $LOOPLAB_ALERT_ID set; exit 0 = delivered.
Each channel may filter by `topics` (health, job_failed, queue_done, paused, test) and `min_level`.

Secrets (a token, an SMTP password) come from the environment (`token_env`, `password_env`) or a file
readable by its owner only (`token_file`, `password_file`; the config file itself when it holds one);
any other file is refused naming the file and its mode. They stay in memory: the outbox names a
channel, never its address or credentials, and a failure's text is stripped of them before it is stored.

Why an outbox: an alert is written in the transaction of what caused it (the finding, the failed job),
so it survives a crash of the driver; a background thread delivers it, with a short timeout, so a
channel that refuses, hangs or answers 500 never slows the queue; a failed try is recorded and retried
with backoff (`retry_s` doubling up to `retry_max_s`) until it goes through: at least once, and the
receiver drops repeats by the id. Grouping: one message per job, rule and window (`window_s`, one hour
by default): later events of the window only count into its `repeats`. The id is made from the group,
the window and the database's stored identity (`database_identity`), so two databases never share one.

Nothing waits for the next queue: when the driver ends, its delivery thread goes on trying what is
pending for at most `flush_s` seconds (30 by default; the file's `flush_s` or $LOOPLAB_ALERT_FLUSH_S)
and the driver logs what it leaves undelivered; `looplab alerts --send` delivers pending alerts with the
same bound, without running the queue (`flush`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shlex
import smtplib
import stat
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass
from email.message import EmailMessage
from enum import StrEnum
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.orchestrator.health import Finding, Level, Rule
from looplab.orchestrator.schema import AlertOutbox, DatabaseIdentity

log = logging.getLogger("looplab.alerts")
OUTBOX = AlertOutbox.__table__
IDENTITY = DatabaseIdentity.__table__
TYPES = ("webhook", "slack", "smtp", "command")
DEFAULT_FILE = Path("~/.config/looplab/alerts.json")
PENDING, DELIVERED = "pending", "delivered"


class Topic(StrEnum):
    """What an alert is about (a channel's `topics` filter names these)."""

    HEALTH = "health"
    JOB_FAILED = "job_failed"
    QUEUE_DONE = "queue_done"
    PAUSED = "paused"
    TEST = "test"


LEVELS = (str(Level.WARNING), str(Level.ERROR))


@dataclass(frozen=True)
class Channel:
    """One place alerts go. `secret` (a token or password) is held here only, never stored."""

    name: str
    type: str
    url: str | None = None
    command: tuple[str, ...] = ()
    host: str | None = None
    port: int = 25
    starttls: bool = False
    user: str | None = None
    sender: str = "looplab@localhost"
    to: tuple[str, ...] = ()
    secret: str | None = dataclasses.field(default=None, repr=False)
    topics: tuple[str, ...] = tuple(Topic)
    min_level: str = str(Level.WARNING)
    timeout_s: float = 5.0

    def wants(self, topic: str, level: str) -> bool:
        return topic in self.topics and LEVELS.index(level) >= LEVELS.index(self.min_level)

    def hide(self, text: str) -> str:
        """`text` without the channel's secret or address (an error message may quote them)."""
        for s in (self.secret, self.url):
            if s:
                text = text.replace(s, "***")
        return text


@dataclass(frozen=True)
class AlertConfig:
    channels: tuple[Channel, ...] = ()
    window_s: float = 3600.0
    retry_s: float = 5.0
    retry_max_s: float = 600.0
    # how long a driver that ends (or `looplab alerts --send`) goes on delivering what is pending: long
    # enough for a receiver that restarts, short enough that a dead one does not hold the shell
    flush_s: float = 30.0


# ---------------------------------------------------------------- configuration


def owner_only(path: Path, what: str) -> Path:
    """`path` if no one but its owner may read or write it, else a ConfigError naming it and its mode."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as e:
        raise ConfigError(f"{what}: cannot read {path}: {e.strerror}") from None
    if mode & 0o077:
        raise ConfigError(
            f"{what}: {path} has mode {mode:04o}, readable by others: a file holding a secret must be "
            f"readable by its owner only (chmod 600 {path})"
        )
    return path


def _secret(where: str, spec: dict[str, Any], name: str, config_file: Path | None) -> str | None:
    """A channel's secret from `<name>_env` (a variable) or `<name>_file` (an owner-only file); a
    secret written in the config file itself needs that file to be owner-only."""
    if spec.get(f"{name}_env"):
        var = str(spec[f"{name}_env"])
        if var not in os.environ:
            raise ConfigError(f"{where}.{name}_env: the variable ${var} is not set")
        return os.environ[var]
    if spec.get(f"{name}_file"):
        path = owner_only(Path(str(spec[f"{name}_file"])).expanduser(), f"{where}.{name}_file")
        return path.read_text().strip()
    if spec.get(name):
        if config_file is not None:
            owner_only(config_file, f"{where}.{name}")
        return str(spec[name])
    return None


CHANNEL_KEYS = (
    "name type url command host port starttls user sender to topics min_level timeout_s "
    "token token_env token_file password password_env password_file"
).split()


def channel(where: str, spec: Any, config_file: Path | None = None) -> Channel:
    """One channel from its mapping, every field checked (a bad one named, with what it accepts)."""
    spec = fields.known_keys(where, spec, CHANNEL_KEYS)
    kind = fields.choice(f"{where}.type", spec.get("type"), TYPES)
    name = str(spec.get("name") or kind)
    topics = spec.get("topics", list(Topic))
    if not isinstance(topics, list | tuple):
        raise ConfigError(f"{where}.topics: expected a list of {', '.join(Topic)}, got {topics!r}")
    out: dict[str, Any] = {
        "name": name,
        "type": kind,
        "topics": tuple(fields.choice(f"{where}.topics", t, list(Topic)) for t in topics),
        "min_level": fields.choice(f"{where}.min_level", spec.get("min_level", "warning"), LEVELS),
        "timeout_s": fields.number(f"{where}.timeout_s", spec.get("timeout_s", 5.0), lo=0, lo_open=True),
    }
    if kind in ("webhook", "slack"):
        url = spec.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}.url: expected an http:// or https:// URL, got {url!r}")
        out.update(url=url, secret=_secret(where, spec, "token", config_file))
    elif kind == "command":
        cmd = spec.get("command")
        cmd = shlex.split(cmd) if isinstance(cmd, str) else cmd
        if not isinstance(cmd, list | tuple) or not cmd or not all(isinstance(c, str) for c in cmd):
            raise ConfigError(f"{where}.command: expected a command line or a list of strings, got {cmd!r}")
        out["command"] = tuple(cmd)
    else:
        to = spec.get("to")
        to = [to] if isinstance(to, str) else to
        if not isinstance(to, list | tuple) or not to:
            raise ConfigError(f"{where}.to: expected an address or a list of addresses, got {to!r}")
        if not isinstance(spec.get("host"), str):
            raise ConfigError(f"{where}.host: expected the SMTP server's host name, got {spec.get('host')!r}")
        out.update(
            host=spec["host"],
            port=fields.integer(f"{where}.port", spec.get("port", 25), lo=1, hi=65535),
            starttls=fields.boolean(f"{where}.starttls", spec.get("starttls", False)),
            user=spec.get("user"),
            sender=str(spec.get("sender", "looplab@localhost")),
            to=tuple(str(t) for t in to),
            secret=_secret(where, spec, "password", config_file),
        )
    return Channel(**out)


def _env_channels(env: dict[str, str]) -> list[dict[str, Any]]:
    """The channels the LOOPLAB_ALERT_* variables describe (one of each type at most)."""
    specs: list[dict[str, Any]] = []
    if env.get("LOOPLAB_ALERT_WEBHOOK"):
        specs.append({"type": "webhook", "url": env["LOOPLAB_ALERT_WEBHOOK"]})
        if env.get("LOOPLAB_ALERT_WEBHOOK_TOKEN"):
            specs[-1]["token_env"] = "LOOPLAB_ALERT_WEBHOOK_TOKEN"
    if env.get("LOOPLAB_ALERT_SLACK"):
        specs.append({"type": "slack", "url": env["LOOPLAB_ALERT_SLACK"]})
    if env.get("LOOPLAB_ALERT_COMMAND"):
        specs.append({"type": "command", "command": env["LOOPLAB_ALERT_COMMAND"]})
    if env.get("LOOPLAB_ALERT_SMTP"):
        host, _, port = env["LOOPLAB_ALERT_SMTP"].partition(":")
        spec: dict[str, Any] = {"type": "smtp", "host": host, "port": int(port) if port.isdigit() else 25}
        spec["to"] = [a.strip() for a in env.get("LOOPLAB_ALERT_EMAIL_TO", "").split(",") if a.strip()]
        spec["sender"] = env.get("LOOPLAB_ALERT_EMAIL_FROM", "looplab@localhost")
        spec["starttls"] = env.get("LOOPLAB_ALERT_SMTP_STARTTLS", "") in ("1", "true", "yes")
        if env.get("LOOPLAB_ALERT_SMTP_USER"):
            spec.update(user=env["LOOPLAB_ALERT_SMTP_USER"], password_env="LOOPLAB_ALERT_SMTP_PASSWORD")
        specs.append(spec)
    return specs


def load(env: dict[str, str] | None = None) -> AlertConfig:
    """The alert channels of this user: the file, then the environment's (no channel: no alerts)."""
    env = dict(os.environ) if env is None else env
    path = (
        Path(env["LOOPLAB_ALERTS"]).expanduser() if env.get("LOOPLAB_ALERTS") else DEFAULT_FILE.expanduser()
    )
    doc: dict[str, Any] = {}
    if path.is_file():
        try:
            doc = fields.mapping(str(path), json.loads(path.read_text()), "a JSON object")
        except ValueError as e:
            raise ConfigError(f"{path}: not JSON ({e})") from None
    elif env.get("LOOPLAB_ALERTS"):
        raise ConfigError(f"$LOOPLAB_ALERTS: no such file {path}")
    doc = fields.known_keys(str(path), doc, ("channels", "window_s", "retry_s", "retry_max_s", "flush_s"))
    specs = doc.get("channels", [])
    if not isinstance(specs, list):
        raise ConfigError(f"{path}: channels: expected a list of channel mappings, got {specs!r}")
    channels = [channel(f"{path}: channels[{i}]", s, path) for i, s in enumerate(specs)]
    channels += [channel(f"$LOOPLAB_ALERT_* ({s['type']})", s) for s in _env_channels(env)]
    names = [c.name for c in channels]
    if len(set(names)) < len(names):
        raise ConfigError(f"alert channels: names must differ, got {names}")
    numbers = {k: fields.number(f"{path}: {k}", doc[k], lo=0, lo_open=True) for k in doc if k != "channels"}
    if env.get("LOOPLAB_ALERT_FLUSH_S"):
        numbers["flush_s"] = fields.number(
            "$LOOPLAB_ALERT_FLUSH_S", _float(env["LOOPLAB_ALERT_FLUSH_S"]), lo=0
        )
    return AlertConfig(tuple(channels), **numbers)


def _float(text: str) -> float | str:
    """`text` as a number, else as given (for fields.number to refuse with the name)."""
    try:
        return float(text)
    except ValueError:
        return text


# ---------------------------------------------------------------- the outbox


def database_identity(conn: Connection) -> str:
    """The database's stored identity (a UUID; revision 0022), written in `conn`'s transaction at its
    first use. A driver asks for it once at its start (`ensure_identity`), so two drivers never race to
    write it in the transaction of an alert."""
    got = conn.execute(sa.select(IDENTITY.c.uuid).where(IDENTITY.c.id == 1)).scalar()
    if got is None:
        got = str(uuid.uuid4())
        conn.execute(IDENTITY.insert().values(id=1, uuid=got, created_at=time.time()))
    return got


def ensure_identity(eng: Engine) -> str:
    """`database_identity` in a transaction of its own; a driver that lost the race reads the winner's."""
    try:
        with eng.begin() as conn:
            return database_identity(conn)
    except sa.exc.IntegrityError:
        with eng.begin() as conn:
            return database_identity(conn)


def message_id(group: str, now: float, window_s: float, identity: str = "") -> str:
    """The stable id of the message of `group` (e.g. "health:12:stall") in the window holding `now`, in
    the database of `identity`: unique to that database."""
    return hashlib.sha256(f"{identity}|{group}|{int(now // window_s)}".encode()).hexdigest()[:32]


def enqueue(
    conn: Connection,
    config: AlertConfig,
    topic: str,
    subject: str,
    body: dict[str, Any],
    *,
    group: str,
    level: str = str(Level.WARNING),
    job_id: int | None = None,
    rule: str | None = None,
    now: float | None = None,
    also: tuple[str, ...] = (),
) -> str | None:
    """Put one message into the outbox for every channel that wants it, or wants a topic of `also` (in
    the caller's transaction); a message of the same group and window already there only counts one more
    repeat. Returns its id (None when no channel wants it)."""
    now = time.time() if now is None else now
    channels = [c.name for c in config.channels if any(c.wants(t, level) for t in (topic, *also))]
    if not channels:
        return None
    msg_id = message_id(group, now, config.window_s, database_identity(conn))
    there = set(
        conn.execute(
            sa.select(OUTBOX.c.channel).where(OUTBOX.c.msg_id == msg_id, OUTBOX.c.channel.in_(channels))
        )
        .scalars()
        .all()
    )
    if there:
        conn.execute(
            OUTBOX.update()
            .where(OUTBOX.c.msg_id == msg_id, OUTBOX.c.channel.in_(there))
            .values(repeats=OUTBOX.c.repeats + 1)
        )
    text = json.dumps({**body, "level": level}, default=str)
    for name in [c for c in channels if c not in there]:
        conn.execute(
            OUTBOX.insert().values(
                msg_id=msg_id,
                channel=name,
                created_at=now,
                topic=str(topic),
                job_id=job_id,
                rule=rule,
                subject=subject,
                body=text,
                repeats=1,
                status=PENDING,
                tries=0,
                next_try_at=now,
            )
        )
    return msg_id


def finding_alert(config: AlertConfig):
    """The health watch's `on_finding`: a finding becomes a message grouped by job and rule."""

    def on_finding(conn: Connection, job_id: int, attempt: int | None, finding: Finding) -> None:
        # a finding that ends the job is its failure's one alert: channels of failed jobs get it too
        ends = finding.level == Level.ERROR and finding.rule != Rule.STALL
        enqueue(
            conn,
            config,
            Topic.HEALTH,
            f"job {job_id}: {finding.rule} ({finding.level})",
            {
                "text": finding.message,
                "attempt": attempt,
                "step": finding.step,
                "key": finding.key,
                "figure": None if finding.value is None else repr(finding.value),
            },
            group=f"health:{job_id}:{finding.rule}",
            level=str(finding.level),
            job_id=job_id,
            rule=str(finding.rule),
            also=(Topic.JOB_FAILED,) if ends else (),
        )

    return on_finding


def payload(row: Any) -> dict[str, Any]:
    """The generic JSON shape of an outbox row's message."""
    body = json.loads(row.body)
    return {
        "id": row.msg_id,
        "topic": row.topic,
        "subject": row.subject,
        "text": body.pop("text", row.subject),
        "job_id": row.job_id,
        "rule": row.rule,
        "repeats": row.repeats,
        "created_at": row.created_at,
        **body,
    }


def send(ch: Channel, message: dict[str, Any]) -> None:
    """Deliver one message on one channel; raises on any failure (refused, timeout, non-2xx, exit != 0)."""
    line = f"[looplab] {message['subject']}: {message['text']}"
    if ch.type in ("webhook", "slack"):
        data = message if ch.type == "webhook" else {"text": f"{line} (id {message['id']})"}
        headers = {"Content-Type": "application/json", "X-Looplab-Alert-Id": message["id"]}
        if ch.secret:
            headers["Authorization"] = f"Bearer {ch.secret}"
        req = urllib.request.Request(ch.url, json.dumps(data).encode(), headers, method="POST")
        with urllib.request.urlopen(req, timeout=ch.timeout_s) as reply:  # raises HTTPError on >= 400
            reply.read()
    elif ch.type == "command":
        env = dict(os.environ, LOOPLAB_ALERT_ID=message["id"])
        done = subprocess.run(
            ch.command,
            input=json.dumps(message),
            text=True,
            env=env,
            timeout=ch.timeout_s,
            capture_output=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"exit status {done.returncode}: {done.stderr.strip()[-300:]}")
    else:
        mail = EmailMessage()
        mail["Subject"], mail["From"], mail["To"] = (
            f"[looplab] {message['subject']}",
            ch.sender,
            ", ".join(ch.to),
        )
        mail["Message-ID"] = f"<{message['id']}@looplab>"
        mail.set_content(f"{message['text']}\n\n{json.dumps(message, indent=1, default=str)}\n")
        with smtplib.SMTP(ch.host, ch.port, timeout=ch.timeout_s) as smtp:
            if ch.starttls:
                smtp.starttls()
            if ch.user:
                smtp.login(ch.user, ch.secret or "")
            smtp.send_message(mail)


def deliver_due(
    eng: Engine, config: AlertConfig, now: float | None = None, limit: int = 50
) -> dict[str, int]:
    """One delivery round: every pending message whose time has come, on its channel; a channel that
    fails is skipped for the rest of the round (its other messages wait for its backoff). Returns
    {"delivered": n, "failed": n}."""
    now = time.time() if now is None else now
    by_name = {c.name: c for c in config.channels}
    with eng.connect() as conn:
        due = conn.execute(
            sa.select(OUTBOX)
            .where(OUTBOX.c.status == PENDING, OUTBOX.c.next_try_at <= now)
            .order_by(OUTBOX.c.id)
            .limit(limit)
        ).all()
    counts, down = {"delivered": 0, "failed": 0}, set()
    for row in due:
        ch = by_name.get(row.channel)
        if ch is None or ch.name in down:
            continue  # a channel no longer configured keeps its messages for when it is back
        try:
            send(ch, payload(row))
        except Exception as e:
            down.add(ch.name)
            counts["failed"] += 1
            delay = min(config.retry_max_s, config.retry_s * 2**row.tries)
            error = ch.hide(f"{type(e).__name__}: {e}")[:500]
            values = {"tries": row.tries + 1, "last_error": error, "next_try_at": time.time() + delay}
        else:
            counts["delivered"] += 1
            values = {"tries": row.tries + 1, "status": DELIVERED, "delivered_at": time.time()}
        with eng.begin() as conn:
            conn.execute(OUTBOX.update().where(OUTBOX.c.id == row.id).values(**values))
    return counts


def pending(eng: Engine) -> list[Any]:
    """The outbox rows not delivered yet (id, msg_id, channel, subject, tries, last_error), oldest first."""
    with eng.connect() as conn:
        return conn.execute(
            sa.select(OUTBOX.c.id, OUTBOX.c.msg_id, OUTBOX.c.channel, OUTBOX.c.subject, OUTBOX.c.tries)
            .add_columns(OUTBOX.c.last_error)
            .where(OUTBOX.c.status == PENDING)
            .order_by(OUTBOX.c.id)
        ).all()


def flush(eng: Engine, config: AlertConfig, wait_s: float, poll_s: float = 1.0) -> dict[str, int]:
    """Deliver every pending message now, not at its backoff's time, in rounds `poll_s` apart until none
    is left of a configured channel or `wait_s` seconds have passed (a round under way is finished).
    Returns {"delivered": n, "failed": n (tries that failed), "left": n (still pending)}."""
    deadline = time.monotonic() + wait_s
    total = {"delivered": 0, "failed": 0}
    names = {c.name for c in config.channels}
    while True:
        got = deliver_due(eng, config, now=time.time() + 1e9, limit=1000)
        total = {k: total[k] + got[k] for k in total}
        left = [r for r in pending(eng) if r.channel in names]
        if not left or time.monotonic() + poll_s > deadline:
            break
        time.sleep(poll_s)
    return {**total, "left": len(pending(eng))}


def say_left(eng: Engine) -> list[str]:
    """A line per message left undelivered (logged by a driver that ends, printed by the CLI)."""
    return [
        f"undelivered: {r.subject} (id {r.msg_id}, channel {r.channel}, {r.tries} tries"
        + (f", last error {r.last_error}" if r.last_error else "")
        + ")"
        for r in pending(eng)
    ]


class Deliverer:
    """The background thread that empties the outbox every `poll_s` seconds, apart from the driver's
    loop: a slow or failing channel costs the queue nothing. A round that fails (the database away) is
    tried again at the next poll. When the driver ends, the same thread flushes (`flush`): only one
    thread ever sends, so nothing is sent twice by this driver."""

    def __init__(self, eng: Engine, config: AlertConfig, poll_s: float = 1.0) -> None:
        self.eng, self.config, self.poll_s = eng, config, poll_s
        self._stop = threading.Event()
        self._flush_s = 0.0
        self._thread = threading.Thread(target=self._loop, name="looplab-alerts", daemon=True)

    def start(self) -> Deliverer:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._round()
        try:  # the driver stops: what is pending goes now, within the bound
            flush(self.eng, self.config, self._flush_s, self.poll_s)
        except Exception:
            log.warning("alert delivery at exit failed", exc_info=True)

    def _round(self) -> None:
        try:
            deliver_due(self.eng, self.config)
        except Exception:  # the database away: the next round tries again
            log.debug("alert delivery round failed", exc_info=True)

    def stop(self, flush_s: float = 3.0) -> list[str]:
        """Stop the thread after it has delivered what is pending, for at most `flush_s` seconds (plus a
        channel's timeout for the try under way); returns a line per message left."""
        self._flush_s = flush_s
        self._stop.set()
        longest = max((c.timeout_s for c in self.config.channels), default=0.0)
        self._thread.join(timeout=flush_s + longest + self.poll_s + 1.0)
        try:
            return [f"{line}: sent by `looplab alerts --send` or the next run" for line in say_left(self.eng)]
        except Exception:  # the database away: nothing to say about it here
            return []


def notify(eng: Engine, config: AlertConfig, topic: str, subject: str, text: str, **kw: Any) -> str | None:
    """`enqueue` in a transaction of its own (for what the driver notices: a failed job, the end of the
    queue, a database that was away); nothing when no channel is configured."""
    if not config.channels:
        return None
    with eng.begin() as conn:
        return enqueue(conn, config, topic, subject, {"text": text}, **kw)


def queue_done(
    eng: Engine, config: AlertConfig, finished: dict[int, str], stopped: bool, worker: str
) -> None:
    """The message at the end of a driver's run: how the queue ended (empty, or stopped) and how the jobs
    this run finished ended. A run that finished nothing and was not stopped sends none: running
    `looplab run --until-empty` on an empty queue again is no news."""
    if not finished and not stopped:
        return
    counts = Counter(str(s) for s in finished.values())
    failed = counts.get("failed", 0)
    text = "this run: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing finished")
    notify(
        eng,
        config,
        Topic.QUEUE_DONE,
        f"queue {'stopped' if stopped else 'empty'}" + (f" with {failed} failed job(s)" if failed else ""),
        text,
        group=f"queue_done:{worker}:{time.time()}",
        level="error" if failed else "warning",
    )
