"""API keys: where they come from, how they are checked, and how they are kept out of output.

A key is read from the variable named by `api_key_env`: first the process environment, then a
`.env` file beside the config (python-dotenv syntax; the environment wins). Only the first 4
characters of a key are ever printed; `ascent.secrets.redact` masks any longer piece of a known
key, and any token that looks like a key, in text that came back from a server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dotenv import dotenv_values

from ascent.api.failures import KeyLooksLikeNameError, KeyMissingError
from ascent.secrets import ENV_NAME, mask_secret, redact

__all__ = ["KeySource", "Secret", "mask_secret", "redact"]

NO_KEY = "no-key"  # sent to endpoints configured with api_key_env = ""


class Secret:
    """A key that prints as its first 4 characters, whatever formats it (repr, str, f-string)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    @property
    def masked(self) -> str:
        return mask_secret(self._value)

    def __repr__(self) -> str:
        return f"Secret({mask_secret(self._value)})"

    __str__ = __repr__

    def __reduce__(self):  # never pickled in clear (checkpoints, multiprocessing)
        raise TypeError("a Secret cannot be pickled")


def _looks_like_a_name(value: str, var: str) -> bool:
    bare = value.strip().lstrip("$").strip("{}")
    if bare == var:
        return True
    return (
        bool(ENV_NAME.match(bare))
        and bare.isupper()
        and (bare.endswith(("_KEY", "_TOKEN", "_SECRET")) or "API" in bare)
    )


@dataclass(frozen=True)
class KeySource:
    """Looks up key variables: the process environment first, then a `.env` file."""

    dotenv_path: Path | None = None
    dotenv: Mapping[str, str] = field(default_factory=dict)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    @classmethod
    def beside(cls, config_source: str | None, env_file: str = ".env") -> KeySource:
        """The key source for a config file: its directory's `env_file` (if any) + environment."""
        if not env_file:
            return cls()
        base = (
            Path(config_source).parent
            if config_source and Path(config_source).exists()
            else Path.cwd()
        )
        path = Path(env_file) if Path(env_file).is_absolute() else base / env_file
        if not path.is_file():
            return cls(dotenv_path=path)
        values = {k: v for k, v in dotenv_values(path).items() if v is not None}
        return cls(dotenv_path=path, dotenv=values)

    def where(self, var: str) -> str | None:
        """'environment', the .env path, or None when the variable is set nowhere."""
        if var in self.environ:
            return "environment"
        if var in self.dotenv:
            return str(self.dotenv_path)
        return None

    def lookup(self, var: str) -> str | None:
        if var in self.environ:
            return self.environ[var]
        return self.dotenv.get(var)

    def require(self, var: str, role: str) -> Secret:
        """The key in `var`, or a diagnosis naming the variable and how to set it.

        An empty `var` (api_key_env = "") is an endpoint without keys: a placeholder is sent.
        """
        if not var:
            return Secret(NO_KEY)
        value = self.lookup(var)
        env_hint = f" or add {var}=... to {self.dotenv_path}" if self.dotenv_path else ""
        if value is None:
            raise KeyMissingError(
                f"role {role}: API key variable {var} is not set; export {var}=<your key>{env_hint}"
            )
        value = value.strip()
        if not value:
            raise KeyMissingError(
                f"role {role}: API key variable {var} is set but empty "
                f"(in the {self.where(var)}); put the key in it{env_hint}"
            )
        if _looks_like_a_name(value, var):
            raise KeyLooksLikeNameError(
                f"role {role}: {var} holds {mask_secret(value)}, which looks like a variable "
                f"name, not a key; set {var} to the key itself (api_key_env names the variable)"
            )
        return Secret(value)
