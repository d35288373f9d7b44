"""Reading a config to migrate: TOML, or the YAML of the SRPO write-up and TRL.

Kept apart from the mapping (`migrate.py`) because a pasted file can hold what no config can
(a YAML anchor inside its own value, nesting without end, an integer of thousands of digits,
half a surrogate pair), and each must become one line naming the file, not a traceback from
deep inside the migration.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ascent.configfile.loader import YAML_SUFFIXES, read_toml
from ascent.errors import ConfigError

MAX_DEPTH = 32  # tables and lists within each other; ascent's configs nest 4 deep


def read_any(path: Path) -> dict[str, Any]:
    """A TOML or YAML config as a dict; one-line `ConfigError` when it cannot be read, or
    when it holds what no config can (a YAML anchor inside itself, nesting past MAX_DEPTH)."""
    data = _read_yaml(path) if path.suffix.lower() in YAML_SUFFIXES else read_toml(path)
    _check_depth(data, path)
    return data


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml  # PyYAML: a dependency of transformers, so always installed with ascent

    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_yaml_loader())
    except OSError as err:
        raise ConfigError(
            f"{path}: cannot read the config ({err.strerror}); check the path"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; save the config as UTF-8") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "not valid YAML"
        raise ConfigError(f"{path}: YAML syntax error{where}: {problem}") from None
    except (ValueError, RecursionError):  # ValueError: an integer of 4300+ digits
        raise ConfigError(
            f"{path}: nested too deeply or a number too long to read; simplify the value"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections and keys at the top level")
    return data


def _yaml_loader() -> type:
    """PyYAML's safe loader, reading `1e-5` as the float YAML 1.2 (and TRL) makes of it:
    YAML 1.1 wants a dot in a float, so PyYAML would hand back the string "1e-5"."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return Loader


def _check_depth(data: dict[str, Any], path: Path) -> None:
    """Refuse a value inside itself (YAML's `a: &a {b: *a}`), nesting past MAX_DEPTH (the
    migration walks every table, and would never end) and a string no UTF-8 file can hold
    (YAML's escape of half a surrogate pair, "\\ud800")."""
    todo: list[tuple[Any, int, tuple[int, ...]]] = [(data, 0, ())]
    while todo:
        node, depth, inside = todo.pop()
        if isinstance(node, str):
            _check_text(node, path)
        if not isinstance(node, (dict, list)):
            continue
        if id(node) in inside:
            raise ConfigError(
                f"{path}: a value contains itself (a YAML anchor used inside its own value); "
                "write the value out"
            )
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"{path}: tables or lists nested more than {MAX_DEPTH} deep; ascent's configs "
                "nest 4 deep, flatten it"
            )
        children = [*node, *node.values()] if isinstance(node, dict) else node
        todo += [(child, depth + 1, (*inside, id(node))) for child in children]


def _check_text(text: str, path: Path) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ConfigError(
            f"{path}: a string holds half of a surrogate pair ({text[err.start]!a}), which "
            "UTF-8 cannot hold; escape the whole character (\\U0001F600, not \\ud83d\\ude00)"
        ) from None
