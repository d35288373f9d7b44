"""The TOML that `ascent config migrate` writes: ascent's keys in file order, each key on one
line with a comment saying where it came from.

    nest({"run.seed": 42, "env.id": "CartPole-v1"}, "classic")   # sections in ascent's order
    emit(nested, "", comments, lines, set())                    # `seed = 42  # from [env] seed`

Values go on one line (arrays and tables inline) so that a comment can follow them; values
quoted in comments go through `shown`, which never prints more than 4 characters of a key.
"""

from __future__ import annotations

import json
import re
from typing import Any

import tomli_w

from ascent.config import aliases
from ascent.config.aliases import Kind
from ascent.config.api import key_shaped, mask_secret
from ascent.errors import one_line


def shown(value: Any, limit: int = 60) -> str:
    """A value for a comment: JSON, one line, cut short; an API key shows 4 characters."""
    if isinstance(value, str) and key_shaped(value):
        return mask_secret(value)
    if isinstance(value, str) and "\\" in value and "'" not in value:
        text = one_line(f"'{value}'")  # a TOML literal string: backslashes as written
    else:
        text = one_line(json.dumps(value, default=str))
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
    path: str,
    comments: dict[str, tuple[str, str]],
    lines: list[str],
    said: set[str],
) -> None:
    """TOML lines for `table` at `path`, each key with its comment ((where from, how) by
    dotted key); a note already given on an earlier line (one alias setting two keys) is not
    repeated."""
    subtables = {k: v for k, v in table.items() if isinstance(v, dict)}
    plain = {k: v for k, v in table.items() if k not in subtables}
    if path and plain:
        lines += ["", f"[{path}]"]
    for key, value in plain.items():  # top-level keys ([[stages]] inline) before any table
        line = _toml_line(key, value)
        origin, note = comments.get(f"{path}.{key}" if path else key, ("", ""))
        text = f"{origin}: {note}" if note and note not in said else origin
        said.add(note)
        lines.append(f"{line}  # {one_line(text)}" if text else line)
    for key, value in subtables.items():
        emit(value, f"{path}.{key}" if path else key, comments, lines, said)
