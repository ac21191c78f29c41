"""The loop-design report (../shared/seeds/003_b9e80e8c3dfc3fdb.txt, a Chinese article on a
CUHK / MBZUAI technical report on looped language models): the study record. Its claims are data:
analysis/claims_data/loop_design.toml (schema: analysis/claims_schema.py; the rule: analysis/claims.py).

The article gives task scores in accuracy points from one model each, with no seeds and no noise level,
so its own numbers resolve none of its claims under the rule (`own_evidence`): a verdict needs our
runs with repeated seeds. Layouts are written P×L (P physical layers looped L times).
"""

from __future__ import annotations

from looplab.analysis.claims_base import Study

STUDY = Study(
    key="loop-design",
    file="003_b9e80e8c3dfc3fdb.txt",
    title="循环语言模型的秘密:多绕几圈真的能让AI变聪明吗? (the loop-design report)",
    sha256="cbaf0c8084ff59a7eda948a0eb0b37115613e85218ba292b16c11f039e1135c5",
)
