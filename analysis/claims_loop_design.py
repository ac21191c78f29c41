"""The loop-design report (../shared/seeds/003_b9e80e8c3dfc3fdb.txt, a Chinese article on a
CUHK / MBZUAI technical report on looped language models): the study record. Its claims are data:
analysis/claims_data/loop_design.toml (schema: analysis/claims_schema.py; the rule: analysis/claims.py).

The article gives task scores in accuracy points from one model each, with no seeds and no noise level:
a difference of two scores gets our default ±2 points (`SCORES`, docs/claims.md), so its own numbers
resolve the large gains and leave the gains of 1-2 points not resolved (`own_evidence`); a verdict on
those needs our runs with repeated seeds. Layouts are written P×L (P physical layers looped L times).
"""

from __future__ import annotations

from looplab.analysis.claims_base import RELATIVE_WHY, DefaultNoise, Study, Unit

# our defaults for one run's figure (docs/claims.md): a difference of two task scores, from the sampling
# error of one accuracy; a relative update or an interaction ratio, the relative default
SCORES = DefaultNoise(
    (Unit.ACCURACY,),
    2.0,
    "the report prints neither its benchmarks' sizes nor a spread over seeds; ±2 accuracy points on a "
    "difference of two single runs' scores is our default: the 95 % sampling half-width of one accuracy "
    "near 50 % on 2,500 items is 1.96 points (1.96 × √(0.25 / 2500))",
)
STUDY = Study(
    key="loop-design",
    file="003_b9e80e8c3dfc3fdb.txt",
    title="循环语言模型的秘密:多绕几圈真的能让AI变聪明吗? (the loop-design report)",
    sha256="cbaf0c8084ff59a7eda948a0eb0b37115613e85218ba292b16c11f039e1135c5",
    defaults=(
        SCORES,
        DefaultNoise((Unit.UPDATE, Unit.RATIO), 0.10, RELATIVE_WHY, relative=True, per_value=True),
    ),
)
