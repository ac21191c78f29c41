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


def test_every_other_demo_table_fits_120_columns(fixture_url, capsys):
    """The extrapolation, adaptive and best-at-loss tables and the families study's iso-FLOP and cost
    tables fold into blocks within 120 columns too (on the fixture database, whichever of them has rows)."""
    from looplab.lab import demo, demo_families

    for show in (demo.print_extrapolation, demo.print_adaptive, demo.print_best_at_loss):
        show(fixture_url, "")
    demo_families.print_family_tables(fixture_url, ["study"])
    out = capsys.readouterr().out
    assert "== iso-FLOP" in out and "== what each family costs" in out
    assert max(len(line) for line in out.splitlines()) <= 120, max(out.splitlines(), key=len)
