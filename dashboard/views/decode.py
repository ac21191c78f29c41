"""Decode: per-token generation latency and KV-cache size per variant × context × batch, with ratios
to a reference variant. The sidebar filters apply (a bench carries the variant and architecture of
the train jobs of its model)."""

from __future__ import annotations

import altair as alt
import streamlit as st

from looplab.analysis import comparison, timing, variants
from looplab.dashboard import ui

st.title("Decode")
url = ui.url()
dec = ui.filter_runs(variants.with_variants(ui.decode(url), name="arch"))
if dec.empty:
    st.info("No decode benchmarks yet: attach `then=['decode_bench']` to a train grid.")
    st.stop()
reference = ui.reference_picker(list(dec["variant_label"]), key="decode_reference")
table = timing.mark_decode(comparison.decode_table(dec, reference=reference), dec)
st.caption(
    "ms/token is the median step time (p10–p90 alongside); ratios are to the reference variant at "
    "the same size, context, batch, device and dtype. `contended`: timed while another job ran on "
    "the node (not comparable); empty: not recorded."
)
if table["contended"].eq(True).any():
    st.warning("Some timings were taken beside other jobs (`contended`): rerun those benches alone.")
ui.table(table, precision=3, key="decode_table")

c1, c2 = st.columns(2)
base = alt.Chart(table).encode(
    x=alt.X("context_len:Q", title="context (tokens)", scale=alt.Scale(type="log", base=2)),
    color=ui.color("variant_label", title="variant"),
    strokeDash=alt.StrokeDash("batch_size:N", title="batch"),
    tooltip=["variant_label", "context_len", "batch_size", "ms_per_token", "kv_cache_mb", "ms_ratio"],
)
c1.altair_chart(
    base.mark_line(point=True)
    .encode(y=alt.Y("ms_per_token:Q", title="ms / token"))
    .properties(title="Latency", height=320),
    width="stretch",
)
c2.altair_chart(
    base.mark_line(point=True)
    .encode(y=alt.Y("kv_cache_mb:Q", title="KV cache (MB)"))
    .properties(title="KV cache", height=320),
    width="stretch",
)
