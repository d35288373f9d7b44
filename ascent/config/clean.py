"""Config section for `ascent data clean`: `[clean]`.

    [clean]
    reasons = ["needs_figure", "proof", "bad_answer", "reference_fails"]   # default: all
    extra_patterns = {proof = ["establish that"], network = ["ftp server"]}

The reasons are the filters registered in `ascent.data.clean.FILTERS`; the config is a leaf and
never imports it, so their names are written once in `ascent.names` (`tests/data/test_clean.py`
checks that they equal the registry's).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from ascent.config.base import Section
from ascent.names import DROP_REASONS, PATTERN_REASONS, unknown_message


class CleanSection(Section):
    """`[clean]`: which problems `ascent data clean` drops, and why."""

    reasons: list[str] = Field(
        default_factory=lambda: list(DROP_REASONS),
        description="Drop reasons that apply (tried in a fixed order, a row gets the first "
        f"that fits); the rest are kept. Valid: {', '.join(DROP_REASONS)}.",
    )
    extra_patterns: dict[str, list[str]] = Field(
        default_factory=dict,
        description="More regexes per text-matched reason, searched in the cleaned problem "
        "text (case-insensitive; ^ and $ match at line ends), e.g. "
        f'{{proof = ["establish that"]}}. Valid keys: {", ".join(PATTERN_REASONS)}.',
    )
    question_sentences: int = Field(
        2,
        ge=2,
        description="multi_question: a math problem with this many different question "
        "sentences (each of 3+ words, outside quotes, not a 'why?') asks several things.",
    )
    proof_with_number: bool = Field(
        False,
        description="proof: also drop a 'prove that' / 'show that' problem whose answer holds a "
        "number (false: keep it, its answer can be checked).",
    )
    allowed_modules: list[str] = Field(
        default_factory=list,
        description="environment: Python packages outside the standard library that your "
        "sandbox has (e.g. numpy); a problem that imports only these is kept.",
    )

    @field_validator("reasons")
    @classmethod
    def _known_reasons(cls, value: list[str]) -> list[str]:
        for reason in value:
            if reason not in DROP_REASONS:
                raise ValueError(
                    "[clean] reasons: " + unknown_message("drop reason", reason, DROP_REASONS)
                )
        if len(set(value)) != len(value):
            raise ValueError("[clean] reasons lists a reason twice; list each once")
        return value

    @model_validator(mode="after")
    def _patterns_apply(self) -> CleanSection:
        readers = {"question_sentences": "multi_question", "proof_with_number": "proof",
                   "allowed_modules": "environment"}  # fmt: skip
        for key, reason in readers.items():
            if self.explicitly_set(key) and reason not in self.reasons:
                raise ValueError(
                    f"[clean] {key}: only the {reason} filter reads it, and [clean] reasons "
                    f"leaves {reason} out; add it to reasons or remove the key"
                )
        for reason, patterns in self.extra_patterns.items():
            if reason not in PATTERN_REASONS:
                raise ValueError(
                    f"[clean] extra_patterns: '{reason}' is not matched by text patterns; "
                    f"valid keys: {', '.join(PATTERN_REASONS)}"
                )
            if reason not in self.reasons:
                raise ValueError(
                    f"[clean] extra_patterns.{reason}: '{reason}' is not in [clean] reasons, so "
                    "its patterns would never apply; add it to reasons or remove the patterns"
                )
            for pattern in patterns:
                try:
                    re.compile(pattern)
                except re.error as err:
                    raise ValueError(
                        f"[clean] extra_patterns.{reason}: {pattern!r} is not a valid regex: {err}"
                    ) from None
        return self
