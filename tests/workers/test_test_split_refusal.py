"""A depth sweep asking for the test split of a corpus that has none is refused at submission, naming the
field, with nothing stored (not after its run trained, losing the sweep); a corpus with room is accepted."""

from __future__ import annotations

import pytest

from looplab import Grid, Queue
from looplab.model.errors import ConfigError
from looplab.workers.data import shards as data
from tests.db_rows import rows

TRAIN = {"recipe": "lean", "size": "tiny", "tokens": 4096, "seed": 0, "device": "cpu"}


def grid(corpus: str = "offline") -> Grid:
    spec = {**TRAIN, "data": {"corpus": corpus}}
    return Grid("ts", base=spec, then=["depth_sweep"], follow={"depth_sweep": {"test_split": True}})


def test_the_offline_corpus_has_no_test_split_and_is_refused_before_anything_is_stored(tmp_path):
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    with pytest.raises(ConfigError) as e:
        q.submit([grid()])
    said = str(e.value)
    assert "test_split: corpus 'offline' has no tokens left for a test split" in said, said
    assert f"of {data.VAL_TOKENS:,} tokens" in said and "leave test_split out" in said
    assert rows(q, "SELECT COUNT(*) FROM jobs") == [(0,)]  # not even the train job


def test_a_corpus_whose_validation_documents_hold_more_is_accepted(tmp_path, monkeypatch):
    # the offline corpus' validation stream holds about 100,000 bytes: with a validation split of 50,000
    # tokens there is room for a test split (the check reads the same stream the build will)
    monkeypatch.setattr(data, "VAL_TOKENS", 50_000)
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    q.submit([grid()])
    assert rows(q, "SELECT kind FROM jobs ORDER BY id") == [("train",), ("depth_sweep",)]


def test_a_local_corpus_too_small_is_refused_and_a_hub_corpus_is_left_to_its_build(tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("a short corpus\n" * 100)
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    with pytest.raises(ConfigError, match=r"test_split: corpus '.*small.txt' has no tokens left"):
        q.submit([grid(str(small))])
    from looplab.workers.evaluate.heldout import refuse_short

    refuse_short("hf:some/corpus")  # not read at submission (offline here): the build checks it


def run_dir(tmp_path, corpus: str = "offline"):
    """A train artifact dir as its run leaves it at the start (spec.json written by the trainer's own
    check), with a checkpoint file beside it: all a sweep on its own reads at submission."""
    from looplab.workers.train.spec import Spec, check_artifact_dir

    art = tmp_path / "run"
    art.mkdir()
    check_artifact_dir(Spec.from_dict({**TRAIN, "data": {"corpus": corpus}}), art)
    (art / "final.pt").write_bytes(b"")
    return art


def test_a_sweep_on_its_own_of_a_run_without_a_test_split_is_refused(tmp_path):
    """A grid of sweeps of a given checkpoint (following no job): the corpus is its run's spec.json's,
    whether the grid names the artifact dir or the checkpoint file in it."""
    art = run_dir(tmp_path)
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    for checkpoint in (art, art / "final.pt"):
        alone = Grid("alone", job="depth_sweep", base={"checkpoint": str(checkpoint), "test_split": True})
        with pytest.raises(
            ConfigError, match=r"grid 'alone': test_split: corpus 'offline' has no tokens left"
        ):
            q.submit([alone])
    assert rows(q, "SELECT COUNT(*) FROM jobs") == [(0,)]
    # without the test split, or where the corpus has room, it is stored
    q.submit([Grid("plain", job="depth_sweep", base={"checkpoint": str(art)})])
    assert rows(q, "SELECT COUNT(*) FROM jobs") == [(1,)]


def test_a_sweep_on_its_own_with_room_for_a_test_split_is_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "VAL_TOKENS", 50_000)  # as above: the offline corpus then has room
    art = run_dir(tmp_path)
    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    q.submit([Grid("alone", job="depth_sweep", base={"checkpoint": str(art), "test_split": True})])
    assert rows(q, "SELECT kind FROM jobs") == [("depth_sweep",)]
