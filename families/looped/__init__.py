"""looplab's own model, the family "looped": `LoopedLM` (`model`), its blocks (`layers`), the loop-design
variants' parameters (`loop_design`), generation over its static KV cache (`decode`) and the published
Parcae checkpoint layout its importer maps (`parcae_layout`).

The family name "looped" (model.names.BUILTIN_FAMILY) is what grids, specs and the database store; the
contract builds a LoopedLM for it (model/contract/resolution.py, the default-family hook). What every family
shares stays in model/: the contract, ModelConfig and the recipes and sizes (still read by the analysis and
the queue), the round schedule, attention and the KV strategies, exit rules and gates, the counts.
"""

from looplab.families.looped import parcae_layout

__all__ = ["PUBLISHED_LAYOUTS"]

# The checkpoint layouts of other code this family reads (the importer asks every family for its own,
# workers/layouts.py): the public Parcae code's, known by config.json's `_class_name`.
PUBLISHED_LAYOUTS = (parcae_layout,)
