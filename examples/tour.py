"""The README's tour grid: runs on CPU with the bundled data (no GPU, no network, no download).

Two recipes x two seeds at the `tiny` size, each with a depth sweep, and parcae retrained for exactly as
long as lean seed 0 trained (an iso-time run): 10 jobs, a few minutes on 2 cores. The same study at a
real scale, which needs a GPU and the Hugging Face hub, is `examples/gpu_study.py`.
"""

from looplab import Grid

TRAIN = {
    "size": "tiny",
    "seq_len": 64,
    "batch_size": 8,
    "tokens": 8 * 64 * 60,  # 60 steps
    "eval_every": 20,
    "eval_tokens": 2048,
    "data": {"corpus": "offline", "tokenizer": "byte"},  # the bundled text, read byte by byte
}

tour = Grid(
    "tour",
    base=TRAIN,
    sweep={"recipe": ["lean", "parcae"], "seed": [0, 1]},
    then=["depth_sweep"],  # starts when its train job succeeded
    follow={"depth_sweep": {"loops": [1, 2, 4, 8], "eval_tokens": 2048}},
)
# iso-time: parcae trained for as long as lean seed 0 took (resolved when that one finishes)
iso = Grid(
    "tour-isotime",
    base={
        **{k: v for k, v in TRAIN.items() if k != "tokens"},
        "recipe": "parcae",
        "seed": 0,
        "budget": {"match_time_of": {"recipe": "lean", "seed": 0}},
    },
    then=["depth_sweep"],
    follow={"depth_sweep": {"loops": [1, 2, 4, 8], "eval_tokens": 2048}},
)
