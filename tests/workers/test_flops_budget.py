"""FLOP budgets and the FLOP accounting of a train run: the `flops` spec field, the vocabulary a spec
resolves to without reading its corpus, whole steps from a FLOP budget, the result row's FLOP fields,
and the device peak table MFU is measured against."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from looplab.model.counts import arch_summary, tokens_for_flops
from looplab.model.errors import ConfigError
from looplab.model.flops import step_flops, training_flops
from looplab.workers.device import peak_flops_of
from looplab.workers.reporter import MemoryReporter
from looplab.workers.train import job as train
from looplab.workers.train.spec import Spec
from tests.workers.conftest import tiny_spec


def _flop_spec(**kw) -> dict:
    """A tiny spec whose budget is only what `kw` gives."""
    return tiny_spec(**{"tokens": None, **kw})


@pytest.mark.parametrize(
    "budget",
    [
        {"tokens": 1000, "flops": 1e12},
        {"time_s": 5.0, "flops": 1e12},
        {"tokens": 1000, "time_s": 5.0, "flops": 1e12},
        {},
    ],
)
def test_exactly_one_budget(budget):
    with pytest.raises(ConfigError, match="tokens / time_s / flops: give exactly one budget"):
        Spec.from_dict(_flop_spec(**budget))


@pytest.mark.parametrize("bad", [0, -1e12, "lots", True])
def test_bad_flop_budget_names_the_field(bad):
    with pytest.raises(ConfigError, match="flops"):
        Spec.from_dict(_flop_spec(flops=bad))


def test_flop_budget_round_trips():
    spec = Spec.from_dict(_flop_spec(flops=3e15))
    assert spec.flops == 3e15 and spec.tokens is None and spec.time_s is None
    assert Spec.from_dict(spec.to_dict()) == spec


def test_resolved_model_config_byte_and_bpe():
    spec = Spec.from_dict(tiny_spec(recipe="lean", size="small", seq_len=128, model={"loops": 6}))
    cfg = spec.resolved_model_config()
    assert cfg.vocab_size == 256 and cfg.seq_len == 128 and cfg.loops == 6 and cfg.d_model == 128
    bpe = Spec.from_dict(tiny_spec(data={"corpus": "offline", "tokenizer": "bpe", "vocab_size": 1000}))
    assert bpe.resolved_model_config().vocab_size == 1000
    assert bpe.resolved_model_config() == bpe.model_config(1000)


def test_resolved_model_config_reads_a_tokenizer_json(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(["a", "b", "c", "ab", "abc", "bc"])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b"), ("ab", "c"), ("b", "c")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.add_special_tokens(["<|end|>", "<|pad|>"])
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    spec = Spec.from_dict(tiny_spec(data={"corpus": "offline", "tokenizer": str(path)}))
    assert spec.resolved_model_config().vocab_size == tok.get_vocab_size() == 8
    path.write_text("not json")  # unreadable: the preset's vocabulary
    assert spec.resolved_model_config().vocab_size == 256  # size tiny


def test_resolved_model_config_imports_no_torch():
    code = (
        "import sys; from looplab.workers.train.spec import Spec; "
        "Spec.from_dict({'recipe': 'parcae', 'flops': 1e15}).resolved_model_config(); "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_flop_budget_trains_the_expected_tokens(looplab_cache, tmp_path):
    batch, seq = 8, 32
    cfg = Spec.from_dict(tiny_spec()).model_config(256)  # byte data: the vocabulary the run will have
    per_token = training_flops(cfg, batch).total
    budget = 5.5 * per_token * batch * seq  # 5.5 steps' worth: 5 whole steps
    assert tokens_for_flops(cfg, budget, batch, seq) == 5 * batch * seq
    rep = MemoryReporter()
    spec = Spec.from_dict(_flop_spec(flops=budget))
    summary = train.run(spec, rep, tmp_path / "run")
    row = next(e["row"] for e in rep.of("result") if e["table"] == "train_results")
    assert row["steps"] == 5 and row["tokens"] == 5 * batch * seq
    assert summary["tokens"] == row["tokens"]
    assert row["flops_per_token"] == pytest.approx(per_token)
    assert row["flops_per_token"] == pytest.approx(
        arch_summary(spec.resolved_model_config(), batch)["flops_per_token"]
    )
    assert row["train_flops"] == pytest.approx(per_token * row["tokens"])
    assert row["train_flops"] <= budget
    assert row["achieved_flops_per_s"] == pytest.approx(row["train_flops"] / row["train_seconds"])
    assert row["mfu"] is None and row["padding_waste"] == 0.0  # CPU; fixed loops
    logs = [e["message"] for e in rep.of("log")]
    assert any(f"FLOP budget {budget:.3g} → 5 steps ({5 * batch * seq:,} tokens)" in m for m in logs), logs
    assert json.loads((tmp_path / "run" / "spec.json").read_text())["flops"] == budget


def test_sampled_loops_report_padding_waste(looplab_cache, tmp_path):
    """The row's padding_waste is measured from the steps' real counts (one forward of the batch each:
    the padded share of the recurrent FLOPs over both steps), not the FLOP model's expectation, which
    stays the budget accounting's figure (flops_per_token)."""
    from looplab.families.looped.model import LoopedLM

    rep = MemoryReporter()
    spec = Spec.from_dict(tiny_spec(recipe="parcae", tokens=8 * 32 * 2))
    train.run(spec, rep, tmp_path / "run")
    row = next(e["row"] for e in rep.of("result") if e["table"] == "train_results")
    cfg = spec.model_config(256)
    steps = [step_flops(cfg, LoopedLM(cfg).sample_loops(8, s, spec.seed).tolist()) for s in range(2)]
    measured = sum(f.padded for f in steps) / sum(f.recurrent for f in steps)
    assert 0 < row["padding_waste"] == pytest.approx(measured)
    assert dict(rep.curve("padding_waste")) == pytest.approx(
        {s: f.padding_waste for s, f in enumerate(steps)}
    )
    expected = training_flops(cfg, spec.batch_size)
    assert row["flops_per_token"] == pytest.approx(expected.total) and expected.padding_waste > 0


def test_mfu_counts_useful_flops_and_hfu_computed_ones(looplab_cache, tmp_path, monkeypatch):
    """With a peak to measure against (a GPU of the table; here a made-up one on the CPU), MFU is the
    useful FLOPs (each row's own rounds) of the timed steps per second over the peak, HFU the computed
    ones (padding included); for parcae's padded forwards HFU > MFU, both reported per step."""
    from looplab.workers.train import trainer

    monkeypatch.setattr(trainer, "peak_flops", lambda device: 1e12)
    rep = MemoryReporter()
    summary = train.run(Spec.from_dict(tiny_spec(recipe="parcae", tokens=8 * 32 * 3)), rep, tmp_path / "run")
    row = next(e["row"] for e in rep.of("result") if e["table"] == "train_results")
    assert summary["flops_computed"] > summary["flops_useful"] > 0
    assert row["mfu"] == pytest.approx(summary["flops_useful"] / row["train_seconds"] / 1e12)
    assert summary["hfu"] == pytest.approx(summary["flops_computed"] / row["train_seconds"] / 1e12)
    assert 0 < row["mfu"] < summary["hfu"]
    assert [s for s, _ in rep.curve("mfu")] == [s for s, _ in rep.curve("hfu")] == [0, 1, 2]
    assert rep.curve("mfu")[-1][1] == pytest.approx(row["mfu"])


def test_utilisation_counts_causal_attention_pairs_and_the_budget_dense_ones(looplab_cache, tmp_path):
    """MFU and HFU count attention as the causal pairs fused kernels compute (as the GPU check does); the
    budget's `flops_per_token` stays the dense count every stored run was planned and compared with."""
    from looplab.model.flops import step_flops
    from looplab.workers.train.trainer import Trainer

    spec = Spec.from_dict(tiny_spec(recipe="fixed4", micro_batch_size=4))
    (tmp_path / "run").mkdir()
    trainer = Trainer(spec, MemoryReporter(), tmp_path / "run")
    dense, causal = trainer._count_step(0), trainer._count_step(0, "causal")
    cfg = spec.model_config(256)
    assert causal.total == pytest.approx(step_flops(cfg, 4, 32, attention="causal").total)
    assert causal.total < dense.total == pytest.approx(training_flops(cfg, 8).total)
    trainer.state.flops_seconds = 0.0
    trainer._account(0, 1.0, timed=True)
    assert trainer.state.flops_computed == pytest.approx(causal.total * trainer.tokens_per_step)
    assert trainer.state.round_flops == pytest.approx(dense.recurrent * trainer.tokens_per_step)


def counted_training_step(spec: Spec, run_dir, custom_mapping) -> tuple[float, float, float]:
    """Step 0 of `spec` as the trainer runs it (every forward and backward of `_accumulate`; the
    optimizer is no part of the FLOP model): (FLOPs per token FlopCounterMode counts, the trainer's own
    count of the step, `_count_step`, its computed and its useful FLOPs per token)."""
    from torch.utils.flop_counter import FlopCounterMode

    from looplab.workers.train.trainer import Trainer

    run_dir.mkdir(parents=True, exist_ok=True)
    trainer = Trainer(spec, MemoryReporter(), run_dir)
    with FlopCounterMode(display=False, custom_mapping=custom_mapping) as counter:
        trainer._accumulate(trainer.model, trainer.forward_model, 0)
    counted = trainer._count_step(0)
    return counter.get_total_flops() / trainer.tokens_per_step, counted.total, counted.useful


@pytest.mark.parametrize("recipe", ["fixed4", "plain"])
def test_mfu_flops_agree_with_an_independent_count(recipe, looplab_cache, tmp_path):
    """What MFU divides by the seconds, checked against PyTorch's own count: FlopCounterMode on one real
    training step (micro-batched, as the trainer splits it) within 5 % of the trainer's count, on the
    CPU (its flash attention kernel registered as the matmuls it is, tests/model/test_flops.py)."""
    from tests.model.test_flops import CPU_FLASH

    spec = Spec.from_dict(tiny_spec(recipe=recipe, micro_batch_size=4))
    counted, computed, useful = counted_training_step(spec, tmp_path / "run", CPU_FLASH)
    assert computed == useful  # fixed loop counts pad nothing
    assert counted == pytest.approx(computed, rel=0.05)
    assert computed == pytest.approx(training_flops(spec.model_config(256), 8).total)  # = flops_per_token


# every entry of workers/device.py DEVICES under the name torch.cuda.get_device_name() gives it:
# (name, key, dense bf16 FLOP/s, memory bytes, bandwidth)
GPU_NAMES = [
    ("NVIDIA H100 80GB HBM3", "h100", 989.5e12, 80e9, 3.35e12),  # SXM
    ("NVIDIA H100 PCIe", "h100_pcie", 756e12, 80e9, 2.0e12),
    ("NVIDIA H100 NVL", "h100_nvl", 835.5e12, 94e9, 3.9e12),  # not the SXM's 989.5
    ("NVIDIA H200", "h200", 989.5e12, 141e9, 4.8e12),
    ("NVIDIA A100-SXM4-80GB", "a100", 312e12, 80e9, 2.039e12),
    ("NVIDIA A100-SXM4-40GB", "a100_40gb", 312e12, 40e9, 1.555e12),
    ("NVIDIA A100-PCIE-40GB", "a100_40gb", 312e12, 40e9, 1.555e12),
    ("NVIDIA L40S", "l40s", 362.05e12, 48e9, 864e9),  # not an L4
    ("NVIDIA L4", "l4", 121e12, 24e9, 300e9),
    ("NVIDIA GeForce RTX 4090", "rtx4090", 165e12, 24e9, 1.008e12),
    ("NVIDIA GeForce RTX 5090", "rtx5090", 209.5e12, 32e9, 1.792e12),
]


@pytest.mark.parametrize("name,key,peak,memory,bandwidth", GPU_NAMES)
def test_peak_flops_table(name, key, peak, memory, bandwidth):
    from looplab.workers.device import device_spec, spec_of

    spec = spec_of(name)
    assert spec is not None and spec.key == key and spec == device_spec(key)
    assert (spec.peak_flops, spec.memory_bytes, spec.bandwidth) == (peak, memory, bandwidth)
    assert peak_flops_of(name) == peak


def test_every_table_entry_is_named_and_unknown_gpus_are_refused():
    """Each entry is reached by a GPU name of GPU_NAMES (none shadowed by an earlier, broader one); a GPU
    the table does not list has no peak (MFU refused, naming where to add it), not a near entry's."""
    from looplab.model.errors import ConfigError
    from looplab.workers.device import DEVICES, device_spec, unknown_peak

    assert {d.key for d in DEVICES} == {key for _, key, *_ in GPU_NAMES}
    for name in ("Tesla V100-SXM2-16GB", "NVIDIA H800", "NVIDIA A10", "NVIDIA B200", "NVIDIA H100X"):
        assert peak_flops_of(name) is None, name
    assert "workers/device.py" in unknown_peak("NVIDIA H800")
    with pytest.raises(ConfigError, match="--device: unknown device 'h800'; accepted: h100_nvl, "):
        device_spec("h800")
