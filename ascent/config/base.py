"""The base every config section derives from.

Sections are frozen pydantic models: a run reads its config, it never writes to it (a stage
that needs different values gets a copy with `model_copy(update=...)`). Unknown keys are
errors, so a typo cannot silently fall back to a default. Every field carries a default and a
one-line `description`; `docs/config.md` is generated from them. Numbers are numbers: inf and
NaN are refused (an lr of inf would train NaN weights and save them as the best model), and so
is `true` where a number belongs (pydantic would read it as 1).
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator


class Section(BaseModel):
    """One `[section]` of a TOML config."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False
    )

    # Where a root config was read from ("<built-in default>" or a file path); set by the loader.
    _source: str | None = PrivateAttr(None)
    # Where values came from besides the file (e.g. settings.json); `config show` prints them.
    _notes: list[str] = PrivateAttr(default_factory=list)
    # Legal settings that can have no effect in this config; `train` and `config show` print
    # them, so that no option is ignored silently.
    _warnings: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name)
                if isinstance(value, bool) and field is not None and _numeric(field.annotation):
                    raise ValueError(
                        f"{name}: {str(value).lower()} is not a number; write a number"
                    )
        return data

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


def _numeric(annotation: Any) -> bool:
    """An int or float field (optional or not), where a boolean is a mistake."""
    if annotation in (int, float):
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return bool(args) and all(a in (int, float) for a in args)
    return False
