"""A published model studied through the real queue on local Ray: the import job (the public code's
fixture, tests/fixtures/parcae_tiny) and its depth sweep and decode bench, shown in the views as a run
without training, its losses in bits per byte of the same validation text, measured with its own
tokenizer; the Depth page then draws bits per byte and says why."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from looplab import Grid, Queue
from tests.db_rows import rows

FIXTURE = Path(__file__).parents[1] / "fixtures" / "parcae_tiny"
SWEEP = {"loops": [1, 2, 4], "eval_tokens": 512, "batch_size": 4, "interaction_loops": [], "device": "cpu"}


@pytest.mark.slow
def test_an_imported_models_depth_sweep_runs_through_the_queue(tmp_path, ray_cluster, monkeypatch):
    from looplab.workers.data.shards import DataSpec, prepare, val_chunks
    from looplab.workers.inputs import EVAL_H0_SEED, load_model

    q = Queue(db=tmp_path / "q.db", artifacts=tmp_path / "art")
    grid = Grid(
        "published",
        job="import",
        base={"source": str(FIXTURE)},
        then=["depth_sweep", "decode_bench"],
        follow={
            "depth_sweep": SWEEP,
            "decode_bench": {"context_lens": [32], "batch_sizes": [1], "warmup": 1, "steps": 2},
        },
    )
    imported, sweep, bench = q.submit(grid)
    q.run(until_empty=True, progress=False, poll_s=0.2, max_concurrent=1)
    st = q.status().set_index("id")
    assert set(st["status"]) == {"succeeded"}, st[["kind", "status", "error"]]

    runs = q.results("runs").set_index("job_id")
    run = runs.loc[imported]  # a run without training, with its architecture and where it came from
    assert run["imported_from"].startswith(f"{FIXTURE.resolve()}@sha256:") and run["tokens"] is None
    assert (run["recipe"], run["d_model"], run["n_prelude"], run["n_recurrent"], run["n_coda"]) == (
        "parcae",
        40,
        2,
        2,
        2,
    )
    assert (
        run["flops_per_token"] > 0
        and run["n_params"] == 170_432
        and run["variant_label"].startswith("parcae_tiny@")
    )
    depth = q.results("depth").sort_values("loops")
    assert list(depth["loops"]) == [1, 2, 4] and set(depth["train_job_id"]) == {imported}
    assert set(depth["imported_from"]) == {run["imported_from"]} and set(depth["variant_id"]) == {
        run["variant_id"]
    }
    (bench_variant,) = rows(q, "SELECT variant_id FROM jobs WHERE id = :j", j=bench)[0]
    assert bench_variant != run["variant_id"]  # a decode bench is about the architecture, not these weights
    assert rows(q, "SELECT COUNT(*) FROM decode_benches WHERE job_id = :j", j=bench)[0][0] >= 1

    # independently: the imported weights on the same documents, tokenized with the model's tokenizer
    art = tmp_path / "art"
    (artifact,) = rows(q, "SELECT artifact_dir FROM jobs WHERE id = :j", j=imported)[0]
    assert Path(artifact).is_relative_to(art)
    model, cfg, _ = load_model(artifact, torch.device("cpu"))
    data = prepare(
        DataSpec.from_dict({"corpus": "offline", "tokenizer": str(Path(artifact) / "tokenizer.json")})
    )
    chunks = val_chunks(data.val, SWEEP["eval_tokens"], cfg.seq_len)
    with torch.no_grad():
        ce = torch.cat(
            [
                F.cross_entropy(
                    model(c[:, :-1], loops=1, h0_seed=EVAL_H0_SEED + i).logits.flatten(0, 1),
                    c[:, 1:].flatten(),
                    reduction="none",
                )
                for i, c in enumerate(chunks.split(SWEEP["batch_size"]))
            ]
        )
    first = depth.iloc[0]
    assert first["val_loss"] == pytest.approx(float(ce.mean()), abs=1e-5)
    targets = [int(t) for t in data.val[1 : len(chunks) * cfg.seq_len + 1]]  # the windows' targets, in order
    n_bytes = len(data.tokenizer.decode(targets).encode())
    assert first["val_bpb"] == pytest.approx(float(ce.sum()) / math.log(2) / n_bytes, rel=2e-3)
    assert first["val_bpb"] < first["val_loss"] / math.log(2)  # more than one byte per token: not per token

    from tests.dashboard.test_pages import frame_with, render, text_of

    at = render(monkeypatch, str(tmp_path / "q.db"), "depth")
    assert "bits per byte (val_bpb)" in text_of(at)
    wide = frame_with(at, "4 loops").set_index("variant_label")
    assert wide.loc[run["variant_label"], "1 loops"] == pytest.approx(first["val_bpb"])
