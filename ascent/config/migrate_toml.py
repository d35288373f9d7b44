"""The TOML that `ascent config migrate` writes: ascent's keys in file order, each key on one
line with a comment saying where it came from.

    nest({"run.seed": 42, "env.id": "CartPole-v1"}, "classic")   # sections in ascent's order
    emit(nested, (), comments, lines, set())                    # `seed = 42  # from [env] seed`

Values go on one line (arrays and tables inline) so that a comment can follow them; values
quoted in comments go through `shown`, which never prints more than 4 characters of a key:
of a string shaped like one, or of any string under a name such as `api_key` or `hub_token`
(a secret need not look random). `tomlable` says whether TOML can hold a value at all.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import tomli_w

from ascent.config import aliases
from ascent.config.aliases import Kind
from ascent.config.api import key_shaped, mask_secret
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


_WORD = re.compile(r"[A-Za-z0-9_\-*.]+")


def redact(text: str) -> str:
    """`text` with every key-shaped word masked: for a reason a conversion gave, which may
    quote the value it refused."""
    return _WORD.sub(lambda m: mask_secret(m[0]) if key_shaped(m[0]) else m[0], text)


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


_TOML_SCALARS = (str, int, float, bool, datetime.date, datetime.time)  # datetime is a date


def tomlable(value: Any) -> bool:
    """True when TOML can hold `value`: no null inside a list or table, no set or bytes
    (YAML's `!!set`, `!!binary`), tables with string keys."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and tomlable(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(tomlable(v) for v in value)
    return isinstance(value, _TOML_SCALARS)


def _order(kind: Kind) -> dict[str, int]:
    order: dict[str, int] = {}
    for section, model in aliases.sections(kind).items():
        order.setdefault(section, len(order))
        for key in model.model_fields:
            order.setdefault(f"{section}.{key}", len(order))
    return order


def nest(values: dict[str, Any], kind: Kind) -> dict[str, Any]:
    """Dotted keys -> nested tables, sections and keys in the order the config models list
    them (unknown ones last, by name)."""
    order = _order(kind)
    out: dict[str, Any] = {}
    for target in sorted(values, key=lambda t: (order.get(t, len(order)), t)):
        *parents, key = target.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = values[target]
    return out


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    """A value on one line (arrays and tables inline), so a comment can follow it."""
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{" + inner + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).strip().removeprefix("v = ")


def _toml_line(key: str, value: Any) -> str:
    return f"{_toml_key(key)} = {_toml_value(value)}"


def emit(
    table: dict[str, Any],
    path: tuple[str, ...],
    comments: dict[str, tuple[str, str]],
    lines: list[str],
    said: set[str],
) -> None:
    """TOML lines for `table` at `path` (its table names), each key with its comment ((where
    from, how) by dotted key); a note already given on an earlier line (one alias setting two
    keys) is not repeated. A table name that is not a bare key is quoted in its header."""
    subtables = {k: v for k, v in table.items() if isinstance(v, dict)}
    plain = {k: v for k, v in table.items() if k not in subtables}
    dotted = ".".join(path)
    if path and plain:
        lines += ["", "[" + ".".join(_toml_key(part) for part in path) + "]"]
    for key, value in plain.items():  # top-level keys ([[stages]] inline) before any table
        line = _toml_line(key, value)
        origin, note = comments.get(f"{dotted}.{key}" if path else key, ("", ""))
        text = f"{origin}: {note}" if note and note not in said else origin
        said.add(note)
        lines.append(f"{line}  # {one_line(text)}" if text else line)
    for key, value in subtables.items():
        emit(value, (*path, key), comments, lines, said)
