"""Errors a user sees. The CLI prints them as one line (`-v` for the traceback).

Bad configuration is `model.errors.ConfigError` (raised by the field toolkit, model/fields.py, in every
package); the errors here are the orchestrator's own. `USER_ERRORS` is what a front end (the CLI, the
dashboard) shows as one line instead of a traceback."""

from looplab.model.errors import ConfigError

__all__ = ["DatabaseError", "LooplabError", "USER_ERRORS"]


class LooplabError(Exception):
    """Base for user-facing errors that are not bad configuration."""


class DatabaseError(LooplabError):
    """The database cannot be used as asked (unknown revision, a write on a read-only path, ...)."""


USER_ERRORS = (LooplabError, ConfigError)
