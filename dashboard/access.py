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
set (at least MIN_SECRET characters); the app then shows nothing to a session without both headers.

On PostgreSQL every page reads as the signed-in person's own database role (`person_url`): the dashboard
logs in as a role made by `looplab db grant NAME --as dashboard` (NOINHERIT, no rights of its own, a
member of every person's role through looplab_dashboard, orchestrator/roles.py), and each of its
connections for that person starts with `-c role=USER`, PostgreSQL's SET ROLE at connection start. The
engines and loaders are cached per URL, so per person. A user whose role the dashboard may not read as
(never granted, a group role, a superuser, the dashboard itself) sees why and nothing else. A SQLite
file has one user: its pages read as whoever opened it.
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


class NoRole(Exception):
    """The signed-in user has no database role that the dashboard may read as."""


def person_url(url: str, user: str) -> str:
    """`url` (the dashboard's own, a `--as dashboard` role) reading as `user`'s PostgreSQL role; raise
    NoRole unless `user` is a role granted as a reader, member or admin (a direct member of
    looplab_dashboard's group). SQLite: `url` itself. The name reaches SQL only as a bound parameter."""
    import sqlalchemy as sa

    from looplab.orchestrator.db import ROLE_NAME
    from looplab.orchestrator.roles import DASHBOARD

    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "postgresql":
        return url
    hint = f"ask an admin to run `looplab db grant {user} --as member` (or reader)"
    if not ROLE_NAME.fullmatch(user):  # `looplab db grant` makes no other names
        raise NoRole(f"no database role for {user}; {hint}")
    eng = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with eng.connect() as conn:
            dashboard, person = conn.execute(sa.text(GRANTED), {"group": DASHBOARD, "user": user}).one()
    finally:
        eng.dispose()
    if not dashboard:
        raise NoRole(
            f"the dashboard's database role ({parsed.username}) cannot read as the people signed in: run "
            f"`looplab db grant {parsed.username} --as dashboard` and serve the dashboard as that role"
        )
    if not person:
        raise NoRole(f"no database role for {user}; {hint}")
    return parsed.update_query_dict({"options": f"-c role={user}"}).render_as_string(hide_password=False)


# whether the session user is in the dashboard's group, and whether `user` was granted to that group
GRANTED = """
SELECT
  EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid
          JOIN pg_roles s ON s.oid = m.member WHERE g.rolname = :group AND s.rolname = session_user),
  EXISTS (SELECT 1 FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.member
          JOIN pg_roles u ON u.oid = m.roleid WHERE g.rolname = :group AND u.rolname = :user
          AND NOT u.rolsuper)
"""


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
