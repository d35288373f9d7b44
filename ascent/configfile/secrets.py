"""Secrets in the files users hand to ascent: what counts as one and how it is shown.

A value is a secret when it is shaped like a key (`api.key_shaped`) or when the name it is
written under says so (`api_key`, `hub_token`, `[service] password`: a secret need not look
random). Whatever quotes a user's value back to them (`ascent config migrate`'s comments, a
settings.json error) goes through `shown`, which never prints more than 4 characters of one.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ascent.config.api import key_shaped, mask_secret, redact  # noqa: F401  (redact: re-exported)
from ascent.errors import one_line

# Words of a name whose value is a secret (`api_key`, `hub_token`, `db_password`); a name
# ending in one of NAMES_A_PLACE holds where the secret is (`api_key_env`), not the secret.
SECRET_WORDS = frozenset(
    "key keys apikey token secret secrets password passwd pwd credential credentials "  # noqa: SIM905
    "auth authorization bearer".split()
)
NAMES_A_PLACE = frozenset({"env", "var", "file", "path", "dir", "name"})


def secret_name(name: str) -> bool:
    """True when a key's name says its value is a secret: `[api] api_key`, `hub_token`,
    `settings.json [service] password`, but not `api_key_env` (a variable's name) or
    `max_tokens` (a count)."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    return bool(words) and words[-1] not in NAMES_A_PLACE and any(w in SECRET_WORDS for w in words)


def masked(value: Any, secret: bool = False) -> Any:
    """`value` with every secret string replaced by its first 4 characters and length: a
    key-shaped string, or any string when `secret` (the value of a secret's name), also
    inside lists and tables (a table's own secret names count)."""
    if isinstance(value, str):
        return mask_secret(value) if secret or key_shaped(value) else value
    if isinstance(value, dict):
        return {
            (mask_secret(k) if isinstance(k, str) and key_shaped(k) else k): masked(
                v, secret or secret_name(str(k))
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [masked(v, secret) for v in value]
    return value


def holds_secret(value: Any, name: str = "") -> bool:
    """True when `masked` would hide part of `value` (written under `name`)."""
    secret = secret_name(name)
    if isinstance(value, str):
        return secret or key_shaped(value)
    if isinstance(value, dict):
        return any(
            (isinstance(k, str) and key_shaped(k)) or holds_secret(v, name if secret else str(k))
            for k, v in value.items()
        )
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(holds_secret(v, name) for v in value)
    return False


def shown(value: Any, limit: int = 60, name: str = "") -> str:
    """A value for a comment or a message: JSON, one line, cut short; a secret shows 4
    characters (`masked`; `name` is the key it was written under)."""
    secret = secret_name(name)
    if isinstance(value, str) and (secret or key_shaped(value)):
        return mask_secret(value)
    if isinstance(value, str) and "\\" in value and "'" not in value:
        text = one_line(f"'{value}'")  # a TOML literal string: backslashes as written
    else:
        text = one_line(json.dumps(masked(value, secret), default=str, ensure_ascii=False))
    return text if len(text) <= limit else text[: limit - 1] + "…"
