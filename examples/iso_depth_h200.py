"""The iso-depth scaling study at the seed's budgets, as `looplab plan` and `looplab submit` read it.

Recurrences r in {1, 2, 4, 8} (2 prelude + 16/r shared layers run r times + 2 coda: effective depth 20),
widths 512, 768 and 1024 (heads of 128), six training-FLOP budgets a factor 10^(1/3) apart from 4.6e17 to
2.2e19, the 144m size's vocabulary (a 32,768-token BPE on FineWeb-Edu) and batches of 32 x 2,048 tokens:
4 x 3 x 6 = 72 train jobs. Priced for an 8 x H200 box from any machine:

    looplab plan examples/iso_depth_h200.py --device h200 --num-gpus 8
    looplab plan examples/iso_depth_h200.py --calibration h200.json     # measured there: looplab calibrate

(docs/planning.md shows the plan.)
"""

from looplab.lab.studies import iso_depth_grid

BUDGETS = [1e18 * 10 ** (k / 3) for k in range(-1, 5)]  # 4.64e17, 1e18, 2.15e18, 4.64e18, 1e19, 2.15e19
FINEWEB_EDU = {"corpus": "hf:HuggingFaceFW/fineweb-edu:sample-10BT", "tokenizer": "bpe", "vocab_size": 32768}

GRIDS = iso_depth_grid(
    r=(1, 2, 4, 8),
    widths=(512, 768, 1024),
    flops=BUDGETS,
    seeds=(0,),
    name="iso-depth-h200",
    data=FINEWEB_EDU,
    size="144m",
    then=(),
    batch_size=32,
)
