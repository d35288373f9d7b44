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
    # Where values came from besides the file (e.g. settings.json); `config show` prints them.
    _notes: list[str] = PrivateAttr(default_factory=list)
    # Legal settings that can have no effect in this config; `train` and `config show` print
    # them, so that no option is ignored silently.
    _warnings: list[str] = PrivateAttr(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        return list(self._warnings)

    @property
    def source(self) -> str | None:
        return self._source

    def explicitly_set(self, name: str) -> bool:
        """True when the user wrote this key with a value other than its default.

        Writing the default itself (as `ascent config show` output does) changes nothing, so
        it does not count: a resolved config must load back as the same config.
        """
        if name not in self.model_fields_set:
            return False
        field = type(self).model_fields[name]
        default = field.default_factory() if field.default_factory else field.default
        return getattr(self, name) != default
