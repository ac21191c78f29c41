"""SQL: a read-only query box over the results database, with the result table and a CSV download.

Writes are refused before the database is touched (`orchestrator.sql.check_readonly`), and the
query runs in a read-only transaction (SQLite `mode=ro` + `query_only`; PostgreSQL a read-only session)
that is stopped after the timeout set on the page, so a runaway query cannot hang it.
"""

from __future__ import annotations

import streamlit as st

from looplab.dashboard import ui
from looplab.orchestrator import frames
from looplab.orchestrator.sql import DEFAULT_TIMEOUT_S

EXAMPLE = (
    "SELECT variant_label, recipe, size, seed, final_val_loss, best_loops, train_flops, tokens_per_s\n"
    "FROM runs\nWHERE final_val_loss IS NOT NULL\nORDER BY final_val_loss"
)

st.title("SQL")
st.caption(
    "Read-only: SELECT / WITH / EXPLAIN. Views for people (each with the variant and architecture): "
    "`runs`, `curves`, `depth`, `decode`; "
    "tables: jobs, metrics, latest_metrics, train_results, depth_evals, round_deltas, decode_benches."
)
url = ui.url()
with st.form("sql_form"):
    sql = st.text_area("Query", value=EXAMPLE, height=140, key="sql_text")
    timeout_s = st.number_input(
        "Timeout (s)",
        min_value=0.1,
        max_value=600.0,
        value=DEFAULT_TIMEOUT_S,
        step=1.0,
        key="sql_timeout",
        help="A query still running after this long is stopped.",
    )
    st.form_submit_button("Run query", key="sql_run")
if sql.strip():  # the example runs on first load; a form only reruns on submit, not per keystroke
    from looplab.orchestrator.errors import DatabaseError
    from looplab.orchestrator.sql import QueryTimeout, WriteRefused

    try:
        df, truncated = frames.sql_query(url, sql, timeout_s=timeout_s)
    except WriteRefused as e:
        st.error(f"Refused — the dashboard never writes to the database. {e}")
    except QueryTimeout as e:
        st.error(f"Stopped — {e}")
    except DatabaseError as e:
        st.error(f"Query failed: {e}")
    else:
        st.caption(f"{len(df):,} rows" + (f" (first {frames.SQL_ROW_LIMIT:,} shown)" if truncated else ""))
        st.dataframe(df, hide_index=True, key="sql_result", placeholder="—")
        st.download_button(
            "Download CSV",
            df.to_csv(index=False).encode(),
            file_name="looplab_query.csv",
            mime="text/csv",
            key="sql_csv",
        )
