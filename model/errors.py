"""The one error type for bad configuration, shared by every package (model → workers → orchestrator).

Messages name the field and what is accepted, e.g.
`ConfigError("recipe: unknown 'lena'; accepted: fixed4, lean, parcae, ...")`.
"""


class ConfigError(ValueError):
    """Bad input: a config, preset, spec, grid or budget."""
