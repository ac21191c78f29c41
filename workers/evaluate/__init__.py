"""The jobs that measure a trained or imported model: `eval` (multiple-choice tasks, and the
lm-eval harness through `lm_eval_adapter`), `depth_sweep` (loss by loop count, on `heldout` tokens)
and `decode_bench` (decode latency and KV-cache size)."""
