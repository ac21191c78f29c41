"""The decode benchmark job: one row per (context, batch) with the true KV-cache size, bad specs named."""

from __future__ import annotations

import pytest

from looplab.model.counts import kv_cache_bytes
from looplab.model.errors import ConfigError
from looplab.model.presets import RECIPES, preset
from looplab.workers.evaluate.decode_bench import Spec, main, run
from looplab.workers.reporter import MemoryReporter


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_preset_reports_true_kv_size(recipe, tmp_path):
    spec = Spec.from_dict(
        {
            "recipe": recipe,
            "context_lens": [24, 40],
            "batch_sizes": [2],
            "warmup": 1,
            "steps": 2,
            "device": "cpu",
        }
    )
    rep = MemoryReporter()
    summary = run(spec, rep, tmp_path)
    rows = rep.of("result")
    assert [r["table"] for r in rows] == ["decode_benches"] * 2
    cfg = preset(recipe, "tiny")
    for r in (x["row"] for x in rows):
        assert r["kv_cache_mb"] == kv_cache_bytes(cfg, r["context_len"], r["batch_size"], "float32") / 2**20
        assert (
            r["arch"] == recipe and r["device"] == "cpu" and r["dtype"] == "float32" and not r["cuda_graph"]
        )
        assert 0 < r["ms_p10"] <= r["ms_per_token"] <= r["ms_p90"]
    assert len(summary["rows"]) == 2 and (tmp_path / "decode_bench.json").exists()
    assert rep.of("progress")[-1]["done"] == 2


def test_spec_round_trip_and_defaults():
    spec = Spec.from_dict({})
    assert Spec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["context_lens"] == [128, 512] and spec.to_dict()["cuda_graph"] == "auto"


@pytest.mark.parametrize(
    "bad, field",
    [
        ({"recipe": "leen"}, "recipe"),
        ({"size": "huge"}, "size"),
        ({"model": {"d_modle": 3}}, "d_modle"),
        ({"model": {"grad_rounds": 0}}, "grad_rounds"),
        ({"context_lens": []}, "context_lens"),
        ({"context_lens": [10], "warmup": 3, "steps": 20}, "context_lens"),
        ({"batch_sizes": [0]}, "batch_sizes"),
        ({"dtype": "int8"}, "dtype"),
        ({"steps": 0}, "steps"),
        ({"device": "tpu"}, "device"),
        ({"cuda_graph": "yes"}, "cuda_graph"),
        ({"contexts": [1]}, "contexts"),
    ],
)
def test_bad_spec_names_the_field(bad, field):
    with pytest.raises(ConfigError, match=field):
        Spec.from_dict(bad)


def test_cli_prints_a_table(capsys):
    assert (
        main(
            [
                "--preset",
                "lean",
                "--context-lens",
                "32",
                "--batch-sizes",
                "1",
                "--steps",
                "2",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "ms/tok" in out and "lean" in out
    assert main(["--preset", "nope"]) == 2


def test_cli_flags_come_from_the_spec():
    from looplab.workers.evaluate.decode_bench import build_parser

    parser = build_parser()
    args = parser.parse_args(
        [
            "--preset",
            "fixed4",
            "--model",
            "d_model=32",
            "--model",
            "n_heads=1",
            "--context-lens",
            "64,32",
            "--cuda-graph",
            "false",
        ]
    )
    spec = Spec.from_dict(parser.spec_dict(args))
    assert spec.model == {"d_model": 32, "n_heads": 1} and spec.context_lens == [32, 64]
    assert spec.cuda_graph is False and spec.steps == Spec.steps
