"""Named-component registries: how a config string becomes a function.

Every pluggable part (advantage estimator, policy loss, loss aggregation, KL estimator,
sampler, reward, rollout engine) is registered under a name. A registry refuses to bind one
name to two different objects, and an unknown name is rejected with the list of valid ones,
so a typo in a config fails at load time instead of silently choosing a default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from ascent.errors import UnknownNameError, did_you_mean

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> component map with optional metadata per entry.

    `meta` carries facts a config validator needs without calling the component, e.g. which
    parameters an advantage estimator reads (so setting an unused one can be refused).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._meta: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **meta: Any) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            existing = self._items.get(name)
            if existing is not None and existing is not obj:
                raise ValueError(
                    f"{self.kind} '{name}' is already registered to {existing!r}; "
                    "choose another name"
                )
            self._items[name] = obj
            self._meta[name] = dict(meta)
            return obj

        return decorator

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.unknown_message(name)) from None

    def meta(self, name: str) -> dict[str, Any]:
        self.get(name)
        return self._meta[name]

    def unknown_message(self, name: str) -> str:
        valid = ", ".join(sorted(self._items))
        return f"unknown {self.kind} '{name}'{did_you_mean(name, self._items)}; valid: {valid}"

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
