"""Who may see the dashboard (issue 56): loopback for one person; beyond it, only behind a proxy that
authenticates people.

Choice: a reverse proxy that signs people in (the lab's single sign-on: oauth2-proxy, nginx or Caddy with
their auth modules) and passes the user in `X-Forwarded-User`, not Streamlit's own OIDC login. Why: a lab
already has an identity provider and a proxy in front of its internal pages, so the dashboard joins it
instead of being registered as one more OIDC client (a redirect URL, a client secret in a file beside it);
it needs no extra package (Streamlit's `st.login` needs Authlib); and it is testable here without an
identity provider. The danger of a header is that a browser can send it too, so the app trusts it only
with a secret that only the proxy knows: `$LOOPLAB_DASHBOARD_SECRET`, which the proxy adds to every
request as `X-Looplab-Proxy-Secret` (a browser cannot add a header to Streamlit's WebSocket, and a
client that talks to the port directly does not know the secret).

`looplab dashboard --address A` refuses a non-loopback A unless `--auth proxy` is given with the secret
set (at least MIN_SECRET characters); the app then shows nothing to a session without both headers. What
the pages read is what the dashboard's database role may read (give it a reader role:
`looplab db grant NAME --as reader`).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
from collections.abc import Mapping

AUTH_ENV = "LOOPLAB_DASHBOARD_AUTH"  # "proxy" when the app must check the proxy's headers
SECRET_ENV = "LOOPLAB_DASHBOARD_SECRET"
SECRET_HEADER = "X-Looplab-Proxy-Secret"
USER_HEADER = "X-Forwarded-User"
MIN_SECRET = 24
AUTH_MODES = ("none", "proxy")
USER_NAME = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")
GUIDE = "docs/lab.md (A dashboard for the lab)"


def is_loopback(address: str) -> bool:
    """Whether `address` (an IP address or `localhost`) is reachable from this machine only."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def check_listen(address: str, auth: str, env: Mapping[str, str]) -> None:
    """Raise ConfigError unless the dashboard may listen on `address` with `auth`: loopback always;
    any other address only with `auth == "proxy"` and the proxy's secret in `env`."""
    from looplab.orchestrator.errors import ConfigError

    if auth not in AUTH_MODES:
        raise ConfigError(f"--auth: expected one of {', '.join(AUTH_MODES)}, got {auth!r}")
    if auth == "proxy":
        if len(env.get(SECRET_ENV, "")) < MIN_SECRET:
            raise ConfigError(
                f"--auth proxy: set ${SECRET_ENV} to a random secret of at least {MIN_SECRET} characters that "
                f"your proxy sends as {SECRET_HEADER} (e.g. `openssl rand -hex 24`); see {GUIDE}"
            )
        return
    if not is_loopback(address):
        raise ConfigError(
            f"--address: {address} is reachable beyond this machine, and the dashboard shows every result "
            f"to whoever reaches it: serve it there only behind a proxy that signs people in, with "
            f"`--auth proxy` and ${SECRET_ENV} set (the proxy sends {USER_HEADER} and {SECRET_HEADER}); "
            f"or keep 127.0.0.1 and reach it through `ssh -L`. See {GUIDE}"
        )


def signed_in_user(headers: Mapping[str, str], secret: str) -> str | None:
    """The user the proxy vouches for in `headers`, or None: the secret header must equal `secret`
    (compared in constant time) and the user header must hold a plain user name."""
    sent = headers.get(SECRET_HEADER) or ""
    if not secret or not hmac.compare_digest(sent.encode(), secret.encode()):
        return None
    user = (headers.get(USER_HEADER) or "").strip()
    return user if USER_NAME.fullmatch(user) else None


def gate() -> str | None:
    """In the app: the signed-in user when the dashboard runs behind the proxy (None on loopback with no
    auth); a session the proxy did not vouch for sees one line saying how to sign in, and nothing else."""
    if os.environ.get(AUTH_ENV) != "proxy":
        return None
    import streamlit as st

    user = signed_in_user(st.context.headers, os.environ.get(SECRET_ENV, ""))
    if user is None:
        st.error("Not signed in: open the dashboard through the lab's sign-in proxy.")
        st.stop()
    return user
