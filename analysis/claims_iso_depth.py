"""The iso-depth scaling law (../shared/seeds/002_452eaacac022864f.txt, a Chinese summary of
Schwethelm, Rueckert and Kaissis, "How Much Is One Recurrence Worth?"): the study record. Its claims are data:
analysis/claims_data/iso_depth.toml (schema: analysis/claims_schema.py; the rule: analysis/claims.py).

The summary states no seeds, device or noise level, and prints φ without an interval: its fitted figures
are taken to half their last printed digit (`PRINTED`, our default, docs/claims.md) and their bands are
our default ±25 %, marked as ours; our fit's bootstrap interval is what a verdict on our runs rests on.
"""

from __future__ import annotations

from looplab.analysis.claims_base import DefaultNoise, Study, Unit

# our default for its fitted figures (docs/claims.md): each as printed, to half its last digit; the
# band's ±25 % stands for the fit's interval the summary does not print
PRINTED = DefaultNoise(
    (Unit.EXPONENT, Unit.RATIO, Unit.FIT),
    0.0,
    "the summary prints each fitted figure without an interval (φ ≈ 0.46 on 002 line 5, R² 0.997 on line "
    "123, the 410M, 580M and 1B sizes of line 127), so each is taken to half its last printed digit and "
    "the band's ±25 % stands for the fit's unstated uncertainty",
    printed=True,
    per_value=True,
)
STUDY = Study(
    key="iso-depth",
    file="002_452eaacac022864f.txt",
    title="How Much Is One Recurrence Worth? Iso-Depth Scaling Laws for Looped Language Models",
    sha256="801f74dfa96a36d7926e8c75d18a02b4dc23cc5dd3603064f0464c8f14236c31",
    defaults=(PRINTED,),
)
