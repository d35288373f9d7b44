"""The TOML that `ascent config migrate` writes: ascent's keys in file order, each key on one
line with a comment saying where it came from.

    nest({"run.seed": 42, "env.id": "CartPole-v1"}, "classic")   # sections in ascent's order
    emit(nested, (), comments, lines, set())                    # `seed = 42  # from [env] seed`

Values go on one line (arrays and tables inline) so that a comment can follow them; values
quoted in comments go through `secrets.shown`, which never prints more than 4 characters of a
key. `tomlable` says whether TOML can hold a value at all.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import tomli_w

from ascent.configfile import aliases
from ascent.configfile.aliases import Kind
from ascent.errors import one_line

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
