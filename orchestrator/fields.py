"""The one field-checking toolkit (`model/fields.py`) for code that may import only the orchestrator:
the dashboard's analysis functions check their arguments with it, so every message names the field and
what is accepted the same way everywhere."""

from model.fields import boolean, choice, int_list, integer, known_keys, mapping, number

__all__ = ["boolean", "choice", "int_list", "integer", "known_keys", "mapping", "number"]
