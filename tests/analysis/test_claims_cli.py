"""`looplab claims` on the dashboard's fixture database (parcae, lean and plain in grid "study", fixed4 in
grid "extra"): the scorecard of every claim, one study's, and as CSV equal to the pure function."""

from __future__ import annotations

import io

import pandas as pd
import pytest

from looplab.analysis import claims


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    from tests.dashboard.conftest import build_fixture_db
    from tests.lab.test_report import add_extra_grid

    path = tmp_path_factory.mktemp("claims_db") / "looplab.db"
    add_extra_grid(build_fixture_db(path))
    return str(path)


def csv_of(db: str, capsys, *flags: str) -> pd.DataFrame:
    from looplab.lab.cli import main

    assert main(["--db", db, "claims", "--csv", *flags]) == 0
    return pd.read_csv(io.StringIO(capsys.readouterr().out))


def test_every_claim_has_a_row_with_its_verdict(db, capsys):
    card = csv_of(db, capsys)
    assert list(card.columns) == claims.SCORECARD_COLUMNS
    assert list(card["claim"]) == [c.id for c in claims.CLAIMS]
    assert set(card["verdict"]) <= {"replicated", "contradicted", "not resolved", "not run"}
    rows = card.set_index("claim")
    # the fixture's share of the 1→8 gain is 78 %: most of it, but not the note's 94 % (band 0.92-0.95)
    assert rows.loc["lean.parcae_share_4_of_8", "verdict"] == "contradicted"
    assert "misses the study's band" in rows.loc["lean.parcae_share_4_of_8", "reason"]
    # a share does not depend on scale: at the tiny scale it is still judged on size, and said so
    assert rows.loc["lean.parcae_share_4_of_8", "scale_note"] == claims.SCALE_FREE
    assert rows.loc["iso.phi_below_one", "reason"] == "needs iso_depth runs (none in this database)"
    assert rows.loc["loop.5x4_beats_nonloop", "verdict"] == "not run"


def test_one_study_and_the_text_table(db, capsys):
    from looplab.lab.cli import main

    lean = csv_of(db, capsys, "--study", "lean")
    assert set(lean["study"]) == {"lean"} and len(lean) == len(claims.claims_of("lean"))
    assert main(["--db", db, "claims", "--study", "iso-depth"]) == 0
    out = capsys.readouterr().out
    assert "\nworth_at_4 " in out and f"{len(claims.claims_of('iso-depth'))} claims:" in out
    assert "lean." not in out


def test_the_study_choices_are_the_registrys(capsys):
    from looplab.lab.cli import build_parser

    action = next(
        a
        for a in build_parser()._subparsers._group_actions[0].choices["claims"]._actions
        if a.dest == "study"
    )
    assert list(action.choices) == list(claims.STUDIES)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["claims", "--study", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_the_iso_depth_claims_read_the_fitted_law(tmp_path, capsys):
    from tests.dashboard.test_scaling_page import build_study_db

    path = tmp_path / "study.db"
    build_study_db(path)  # 27 iso_depth runs, r in 1, 2, 4, from a law with φ = 0.5
    card = csv_of(str(path), capsys, "--study", "iso-depth").set_index("claim")
    phi = card.loc["iso.phi_below_one"]
    assert phi["low"] < phi["value"] < phi["high"] and phi["n_seeds"] == 27
    assert 0 < phi["low"] and phi["high"] < 1 and phi["verdict"] == "replicated"
    assert card.loc["iso.phi_above_zero", "verdict"] == "replicated"
    worth = card.loc["iso.worth_at_4"]
    assert worth["verdict"] == "replicated"  # under the 4 blocks it costs
    assert worth["value"] == pytest.approx(4 ** phi["value"])
    assert "27 runs; r in 1, 2, 4" in worth["our_scale"] and worth["scale_note"] == claims.SCALE_FREE
    assert card.loc["iso.gap_grows_with_r", "verdict"] == "not run"


def test_the_text_table_fits_120_columns_grouped_by_study_and_json_has_every_column(db, capsys):
    from looplab.lab.cli import main

    assert main(["--db", db, "claims"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 120
    heads = [line for line in lines if line.startswith("== ")]
    assert [h.split(":")[0] for h in heads] == [f"== {s}" for s in claims.STUDIES]
    assert f"== lean: {len(claims.claims_of('lean'))} claims:" in heads[0]
    # the share is judged on size (scale-free) and shows its band; the study's stated figure is shown,
    # and where the note's text and tables disagree the contradiction is on its own line
    share = next(line for line in lines if line.startswith("parcae_share_4_of_8 "))
    assert "contradicted" in share and " size " in share and "0.9376* [0.9204, 0.9547]" in share
    assert any(line.startswith("    stated: 94%") for line in lines)
    assert any(line.startswith("    contradiction: the note says plain beats lean") for line in lines)
    assert main(["--db", db, "claims", "--json"]) == 0
    records = pd.read_json(io.StringIO(capsys.readouterr().out), orient="records")
    assert list(records.columns) == claims.SCORECARD_COLUMNS and len(records) == len(claims.CLAIMS)
    row = records.set_index("claim").loc["lean.plain_beats_lean_equal_time"]
    assert row["contradiction"].startswith("the note says") and "disagrees" in row["stated"]
