"""The lean-recipe note (../shared/seeds/000_e25defff398d2c72.txt): the study record (its file, sha256
and noise statement) and the constants the measuring code matches a claim's metric by. Its claims are
data: analysis/claims_data/lean.toml (schema: analysis/claims_schema.py; the rule: analysis/claims.py).

Scales: the note trains on one RTX 5090 24G, 8650 万 (86.5 M) and 1.44 亿 (144 M) parameters on
5 亿, 10 亿 and 20 亿 tokens with seeds 43-45; its noise statement (line 3) is that two trainings of
one recipe differ by up to 0.01 in loss, so a difference under 0.01 counts as noise.
"""

from __future__ import annotations

from looplab.analysis.claims_base import RELATIVE_WHY, DefaultNoise, Quote, Study, Unit

# our defaults for one run's figure where the note states no noise (docs/claims.md): a timing, from the
# one setting it times twice; a relative update, the relative default
TIMING = DefaultNoise(
    (Unit.RATIO,),
    0.01,
    "the note times one setting twice: parcae at 86 M on 0.5 B tokens, 2.59 h for seed 43 (000 line 71) "
    "and 2.61 h beside 3.5505, its three seeds' mean loss (line 89): 0.8 % apart (derived), so ±1 % per timing",
    relative=True,
    per_value=True,
)
STUDY = Study(
    key="lean",
    file="000_e25defff398d2c72.txt",
    title="研究笔记 · 2026 年 10 月 23 日 (the lean-recipe note)",
    sha256="dae4efc063be6e039756ee58fbfb9ad883b545d99ac8b63f10288876cab35ec2",
    noise=Quote("0.01"),
    noise_lines=(3, 3),
    defaults=(TIMING, DefaultNoise((Unit.UPDATE,), 0.10, RELATIVE_WHY, relative=True, per_value=True)),
)
# the metric note of the equal-data claims: analysis.findings measures those claims by it
EQUAL_DATA = "comparison.iso_data_table (sampled recipes at their best loop count, fixed ones at 4)"
