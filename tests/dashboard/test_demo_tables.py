"""The demo's comparison tables (lab/demo.py `print_tables`) fit 120 columns; `looplab demo --wide`
prints every column, one line per row. On the dashboard's fixture database (runs of several recipes and
seeds, depth sweeps, an iso-time pair), SQLite and PostgreSQL."""

from __future__ import annotations

from looplab.lab.demo import print_tables


def test_the_demo_tables_fit_120_columns_and_wide_has_every_column(fixture_url, capsys):
    print_tables(fixture_url)
    narrow = capsys.readouterr().out
    print_tables(fixture_url, wide=True)
    wide = capsys.readouterr().out
    for text in (narrow, wide):
        assert "== iso-data" in text and "== iso-time" in text and "verdict" in text
    assert max(len(line) for line in narrow.splitlines()) <= 120
    assert "variant_id" in wide and "variant_id" not in narrow  # the wide form keeps every column
    assert max(len(line) for line in wide.splitlines()) > 120
