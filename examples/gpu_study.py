"""The tour's study at a real scale: needs a GPU (86m models, 500 M tokens a run) and the Hugging Face
hub (FineWeb-Edu is downloaded and tokenized by a `prepare` job first). Price it before submitting:
`looplab plan examples/gpu_study.py --device h100` (docs/planning.md).
"""

from looplab import Grid

lean_vs_parcae = Grid(
    "lean-vs-parcae",
    job="train",
    base={
        "size": "86m",
        "tokens": 500_000_000,
        "data": {
            "corpus": "hf:HuggingFaceFW/fineweb-edu:sample-10BT",
            "tokenizer": "bpe",
            "vocab_size": 32768,
        },
    },
    sweep={"recipe": ["parcae", "fixed4", "lean"], "seed": [43, 44, 45]},
    then=["depth_sweep", "decode_bench"],  # follow-ups start when their train job succeeded
    # a sweep evaluates the train job's batch (256 sequences); 16 per forward fit an 80 GB GPU (~12 GB)
    follow={"depth_sweep": {"micro_batch_size": 16}},
)
# iso-time: parcae retrained for exactly as long as lean seed 43 trained (resolved when that finishes)
iso = Grid(
    "parcae-at-lean-time",
    base={
        "size": "86m",
        "recipe": "parcae",
        "seed": 43,
        "budget": {"match_time_of": {"recipe": "lean", "seed": 43}},
    },
)
