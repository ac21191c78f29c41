"""The iso-depth scaling law (../shared/seeds/002_452eaacac022864f.txt, a Chinese summary of
Schwethelm, Rueckert and Kaissis, "How Much Is One Recurrence Worth?"): the study record. Its claims are data:
analysis/claims_data/iso_depth.toml (schema: analysis/claims_schema.py; the rule: analysis/claims.py).

The summary states no seeds, device or noise level, and prints φ without an interval, so its own
numbers resolve none of these claims under the rule (`own_evidence`); our fit's bootstrap interval is
what a verdict rests on.
"""

from __future__ import annotations

from looplab.analysis.claims_base import Study

STUDY = Study(
    key="iso-depth",
    file="002_452eaacac022864f.txt",
    title="How Much Is One Recurrence Worth? Iso-Depth Scaling Laws for Looped Language Models",
    sha256="801f74dfa96a36d7926e8c75d18a02b4dc23cc5dd3603064f0464c8f14236c31",
)
