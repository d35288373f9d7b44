"""The base every config section derives from.

Sections are frozen pydantic models: a run reads its config, it never writes to it (a stage
that needs different values gets a copy with `model_copy(update=...)`). Unknown keys are
errors, so a typo cannot silently fall back to a default. Every field carries a default and a
one-line `description`; `docs/config.md` is generated from them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, PrivateAttr


class Section(BaseModel):
    """One `[section]` of a TOML config."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)

    # Where a root config was read from ("<built-in default>" or a file path); set by the loader.
    _source: str | None = PrivateAttr(None)

    @property
    def source(self) -> str | None:
        return self._source

    def explicitly_set(self, name: str) -> bool:
        """True when the user wrote this key (in the file or with --set), not the default."""
        return name in self.model_fields_set
