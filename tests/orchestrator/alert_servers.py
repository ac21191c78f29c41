"""Real local receivers for the alert tests, on 127.0.0.1 only: an HTTP server that records what is
POSTed (or answers an error), and a small SMTP server (EHLO, AUTH PLAIN, MAIL, RCPT, DATA) that keeps
the messages it receives."""

from __future__ import annotations

import contextlib
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


class Receiver:
    """What a webhook server received: (headers, JSON body) per request; `status` is its answer."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[tuple[dict[str, str], Any]] = []

    def ids(self) -> list[str]:
        return [h.get("X-Looplab-Alert-Id") for h, _ in self.requests]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_receiver(port: int = 0, status: int = 200) -> Iterator[tuple[str, Receiver]]:
    """An HTTP server on 127.0.0.1 (`port`, 0: any free one) for the duration; yields (URL, Receiver)."""
    got = Receiver(status)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            got.requests.append((dict(self.headers), json.loads(body)))
            self.send_response(got.status)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def smtp_receiver() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """A minimal SMTP server on 127.0.0.1 (what smtplib needs: EHLO with AUTH PLAIN, MAIL, RCPT, DATA,
    QUIT); yields (port, messages), each {"from", "to", "data", "auth"}."""
    messages: list[dict[str, Any]] = []

    class Handler(socketserver.StreamRequestHandler):
        def say(self, line: str) -> None:
            self.wfile.write(f"{line}\r\n".encode())

        def handle(self) -> None:
            self.say("220 localhost test SMTP")
            msg: dict[str, Any] = {"to": [], "auth": None}
            while line := self.rfile.readline().decode().rstrip("\r\n"):
                verb = line.split(" ", 1)[0].upper()
                if verb == "EHLO":
                    self.wfile.write(b"250-localhost\r\n250 AUTH PLAIN\r\n")
                elif verb == "AUTH":
                    msg["auth"] = line.split(" ", 2)[2] if line.count(" ") >= 2 else None
                    self.say("235 ok")
                elif verb == "MAIL":
                    msg["from"] = line[10:]
                    self.say("250 ok")
                elif verb == "RCPT":
                    msg["to"].append(line[8:])
                    self.say("250 ok")
                elif verb == "DATA":
                    self.say("354 go on")
                    data = []
                    while (part := self.rfile.readline().decode()) not in (".\r\n", ""):
                        data.append(part)
                    messages.append({**msg, "data": "".join(data)})
                    msg = {"to": [], "auth": msg["auth"]}
                    self.say("250 queued")
                elif verb == "QUIT":
                    self.say("221 bye")
                    return
                else:
                    self.say("250 ok")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], messages
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def hanging_receiver() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts connections and never answers: a channel that times out."""
    held: list[socket.socket] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    finally:
        stop.set()
        thread.join()
        for s in held:
            s.close()
        server.close()


@contextlib.contextmanager
def late_receiver(after_s: float) -> Iterator[tuple[str, Receiver]]:
    """A webhook whose port refuses connections for the first `after_s` seconds, then an `http_receiver`
    on it (a receiver restarting, a network coming back); yields (URL, Receiver) at once."""
    port, got, stop = free_port(), Receiver(), threading.Event()

    def serve() -> None:
        if stop.wait(after_s):
            return
        with http_receiver(port) as (_, inner):
            inner.requests = got.requests  # one list: what the late server receives is `got`'s
            stop.wait()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/hook", got
    finally:
        stop.set()
        thread.join(timeout=10)
