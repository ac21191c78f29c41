"""The looplab dashboard: `streamlit run dashboard/app.py` (or `looplab dashboard`).

This entry point only opens the database (read-only), draws the sidebar filters that every page
shares, and hands over to the selected page. Pages live in `views/`, one file each, and draw what
`dashboard.analysis` computes from what `dashboard.data` reads. The folder is not called `pages/`
on purpose: Streamlit would then also serve those files as pages of their own (on a direct URL load),
running them without this entry point.
"""

from __future__ import annotations

import streamlit as st

from dashboard import ui

PAGES = [
    st.Page("views/queue.py", title="Queue", icon=":material/list:", default=True),
    st.Page("views/runs.py", title="Runs", icon=":material/show_chart:"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("views/depth.py", title="Depth", icon=":material/repeat:"),
    st.Page("views/decode.py", title="Decode", icon=":material/speed:"),
    st.Page("views/sql.py", title="SQL", icon=":material/database:"),
]

st.set_page_config(page_title="looplab", page_icon=":material/loop:", layout="wide")
page = st.navigation(PAGES)
url = ui.open_db()
if url is None:
    st.stop()
st.session_state["db_url"] = url
st.sidebar.caption(f"database (read-only): `{url}`")
ui.sidebar_filters(ui.runs(url))
page.run()
