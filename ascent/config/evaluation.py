"""Config section for `ascent eval`: `[eval]`."""

from __future__ import annotations

from ascent.config.base import Section


class EvalSection(Section):
    """`[eval]`: which policy `ascent eval` runs on which problem set, and how it is scored."""
