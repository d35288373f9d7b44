"""User-facing errors.

Anything a user can fix (a bad config value, a missing key, an unreachable endpoint) is raised
as an `AscentError`. The CLI prints its message as one line and exits with code 2, without a
traceback unless `--debug` is given. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

EXIT_USER_ERROR = 2


class AscentError(Exception):
    """An error the user can fix; its message must say what is wrong and how to fix it."""

    exit_code: int = EXIT_USER_ERROR


class ConfigError(AscentError):
    """A configuration file or override that cannot be used as written."""


class UnknownNameError(AscentError, KeyError):
    """A registry lookup for a name nobody registered."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ` (did you mean 'x'?)` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
