"""The looplab dashboard: `streamlit run dashboard/app.py` (or `looplab dashboard`).

This entry point only opens the database (read-only), draws the sidebar filters that every page
shares, and hands over to the selected page. Pages live in `views/`, one file each, and draw what
`analysis/` computes from what `orchestrator.frames` reads. The folder is not called `pages/`
on purpose: Streamlit would then also serve those files as pages of their own (on a direct URL load),
running them without this entry point.

Every page has its own URL (`/queue`, `/runs`, `/compare`, `/depth`, `/decode`, `/tasks`,
`/extrapolation`, `/adaptive`, `/plan`, `/scaling`, `/claims`, `/sql`).
Streamlit serves its default page at the root only, never at that page's `url_path`, so the default
here is a hidden page that forwards the root to `/queue` (query parameters included).
"""

from __future__ import annotations

import streamlit as st

from looplab.dashboard import access, ui
from looplab.orchestrator.db import display_url

QUEUE = st.Page("views/queue.py", title="Queue", icon=":material/list:", url_path="queue")
PAGES = [
    QUEUE,
    st.Page("views/runs.py", title="Runs", icon=":material/show_chart:", url_path="runs"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page("views/depth.py", title="Depth", icon=":material/repeat:", url_path="depth"),
    st.Page("views/decode.py", title="Decode", icon=":material/speed:", url_path="decode"),
    st.Page("views/tasks.py", title="Tasks", icon=":material/quiz:", url_path="tasks"),
    st.Page(
        "views/extrapolation.py",
        title="Extrapolation",
        icon=":material/trending_flat:",
        url_path="extrapolation",
    ),
    st.Page("views/adaptive.py", title="Adaptive", icon=":material/tune:", url_path="adaptive"),
    st.Page("views/plan.py", title="Plan", icon=":material/schedule:", url_path="plan"),
    st.Page("views/scaling.py", title="Scaling", icon=":material/trending_down:", url_path="scaling"),
    st.Page("views/claims.py", title="Claims", icon=":material/fact_check:", url_path="claims"),
    st.Page("views/sql.py", title="SQL", icon=":material/database:", url_path="sql"),
]


def _to_queue() -> None:
    st.switch_page(QUEUE, query_params=st.query_params.to_dict())  # a linked filter survives the forward


HOME = st.Page(_to_queue, title="looplab", url_path="home", default=True, visibility="hidden")

st.set_page_config(page_title="looplab", page_icon=":material/loop:", layout="wide")
page = st.navigation([HOME, *PAGES])
user = access.gate()  # behind the lab's proxy: nothing for a session it did not sign in
url = ui.open_db(user)  # behind the proxy on PostgreSQL: read as the signed-in person's role
if url is None:
    st.stop()
st.session_state["db_url"] = url
st.sidebar.caption(f"database (read-only): `{display_url(ui.db_url())}`")
if user:
    st.sidebar.caption(f"signed in as {user}")
role = ui.database_role(url)
if role:
    st.sidebar.caption(f"database role: {role}")
ui.sidebar_filters(ui.runs(url))
page.run()
