"""User-facing errors.

Anything a user can fix (a bad config value, a missing key, an unreachable endpoint) is raised
as an `AscentError`. The CLI prints its message as one line and exits with code 2, without a
traceback unless `--debug` is given. Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

EXIT_USER_ERROR = 2
# Characters that would break a message over lines (or rewrite the terminal) when a user's
# value is quoted in it: C0/C1 controls except tab, and the Unicode line/paragraph separators.
_LINE_BREAKING = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    r"""`text` with line breaks and control characters escaped (a newline shows as `\n`)."""
    return _LINE_BREAKING.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class AscentError(Exception):
    """An error the user can fix; its message must say what is wrong and how to fix it.

    The message is always one line: a newline in a quoted value (a column name, a TOML key)
    is shown escaped, as `\\n`, so the CLI prints it as the one line it promises.
    """

    exit_code: int = EXIT_USER_ERROR

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], str):
            args = (one_line(args[0]), *args[1:])
        super().__init__(*args)


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
