"""Errors a user sees. The CLI prints them as one line (`-v` for the traceback)."""

from model.errors import ConfigError

__all__ = ["ConfigError", "DatabaseError", "LooplabError", "USER_ERRORS"]


class LooplabError(Exception):
    """Base for user-facing errors that are not bad configuration."""


class DatabaseError(LooplabError):
    """The database cannot be used as asked (unknown revision, a write on a read-only path, ...)."""


USER_ERRORS = (LooplabError, ConfigError)
