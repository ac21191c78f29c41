"""Model families: looplab's own (`looped/`, built in: a grid names it "looped", or no family),
and others written against the model contract (docs/own-model.md) only: each is a package whose
`factory(config) -> torch.nn.Module` a grid names as "families.NAME:factory". A family imports
`model` (the contract's helpers) and torch, nothing else of looplab's, so it could live in its own
repository unchanged (tests/test_imports.py holds the rule).

A family that reads the checkpoints of another code base declares them as `PUBLISHED_LAYOUTS` (modules
or objects with `MODEL_TYPE`, `FAMILY`, `config_from_published(raw)` and `state_from_published(...)`):
the importer (workers/layouts.py) asks every family package here, and every entry point of the group
`looplab.layouts`, and names none of them. A layout of looplab's own family (whose config is the run's
`ModelConfig`; the public Parcae code's, `looped/parcae_layout.py`) is known by config.json's
`_class_name` instead: it has `CLASS_NAME`, `FAMILY`, `config_from_published(raw) -> ModelConfig` and
`state_from_published(state, want, cfg)`, and refuses what it cannot read with a ConfigError naming the
field or tensor.
"""
