"""`looplab dashboard [--db URL] [--port N]`: start Streamlit on 127.0.0.1 against the results database.

The database URL travels to the app in $LOOPLAB_DB; the app opens it read-only and never writes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

APP = Path(__file__).with_name("app.py")


def command(port: int, address: str = "127.0.0.1") -> list[str]:
    """The `streamlit run` command line (local only, no browser popup, no usage statistics, and the
    viewer toolbar: no Deploy / Rerun / Clear cache menu, the dashboard being read-only)."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(APP),
        "--server.address",
        address,
        "--server.port",
        str(int(port)),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "viewer",
    ]


def cli_dashboard(args) -> int:
    """Resolve the database, check it opens read-only, then run Streamlit until Ctrl-C."""
    from looplab.dashboard import access
    from looplab.orchestrator.db import display_url, readonly_engine, resolve_url

    address = getattr(args, "address", None) or "127.0.0.1"
    auth = getattr(args, "auth", None) or "none"
    access.check_listen(address, auth, os.environ)  # before anything listens
    url = resolve_url(args.db)
    readonly_engine(url)  # fail here with one clear line (no file, schema behind), not in the browser
    port = int(getattr(args, "port", 8501) or 8501)
    signed = "; only sessions its proxy signed in" if auth == "proxy" else ""
    print(
        f"looplab dashboard: http://{address}:{port}  (database {display_url(url)}, read-only{signed})",
        flush=True,
    )
    env = {**os.environ, "LOOPLAB_DB": url, access.AUTH_ENV: auth}
    proc = subprocess.Popen(command(port, address), env=env)
    # SIGTERM to this process must not orphan Streamlit (Ctrl-C reaches both through the terminal)
    previous = signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
