"""The Adaptive page on cells whose exits were emulated from separate forwards (a model family without
the readout at any round, workers/adaptive/family.py): it says so for that variant and draws the cells
without KV figures; a variant of native cells gets no such line."""

from __future__ import annotations

import sqlalchemy as sa

from tests.dashboard.test_adaptive_page import add_adaptive_rows
from tests.dashboard.test_pages import render, text_of


def test_the_adaptive_page_labels_emulated_exits(monkeypatch, tmp_path):
    from looplab.orchestrator.db import dispose_all, engine
    from tests.dashboard.conftest import build_fixture_db

    url = build_fixture_db(tmp_path / "looplab.db")
    add_adaptive_rows(url)
    at = render(monkeypatch, url, "adaptive")
    assert not at.exception and "exits emulated" not in text_of(at)
    with engine(url).begin() as conn:  # as the adaptive job writes a family's cells
        conn.execute(
            sa.text(
                "UPDATE adaptive_evals SET config = config || ' (emulated)', kv_mib = NULL, "
                "kv_mib_needed = NULL, rule_flops_per_token = NULL"
            )
        )
    dispose_all()
    import streamlit as st

    st.cache_data.clear()  # the page's frames are cached by URL
    at = render(monkeypatch, url, "adaptive")
    assert not at.exception, [e.message for e in at.exception]
    assert "exits emulated" in text_of(at) and "(emulated)" in text_of(at)
