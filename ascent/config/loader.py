"""TOML file + `--set` overrides -> a validated config, or one line saying what to fix.

A config with an `[env]` section is a classic PPO run (`ClassicConfig`); anything else is an
LLM run (`LLMConfig`). With no file, the built-in demo recipe shipped in `ascent/recipes/` is
used, so `ascent train` works out of the box.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import BaseModel, ValidationError

from ascent.config.classic import SETTINGS_FILE, ClassicConfig, merge_settings_json
from ascent.config.llm import LLMConfig
from ascent.errors import ConfigError, did_you_mean

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

AnyConfig = LLMConfig | ClassicConfig
BUILTIN_RECIPE = "default.toml"
BUILTIN_SOURCE = "<built-in default>"


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> AnyConfig:
    """Read, override and validate a config; raise `ConfigError` with a one-line message."""
    source, raw = _read(path)
    _refuse_huge_integers(raw, source)
    override_keys = set()
    for item in overrides:
        key = _apply_override(raw, item)
        override_keys.add(key)
    notes: list[str] = []
    origins = {key: "--set" for key in override_keys}  # where a key's value came from
    if "env" in raw:
        config_path = Path(path) if path is not None else None
        given = raw.get("run")
        raw, notes = merge_settings_json(raw, config_path)
        if notes and config_path is not None:  # [run] keys the TOML left out: settings.json's
            settings = str(config_path.parent / SETTINGS_FILE)
            taken = {k: v for k, v in raw["run"].items() if k not in (given or {})}
            _refuse_huge_integers({"run": taken}, settings)
            origins |= {f"run.{key}": settings for key in taken}
        root: type[BaseModel] = ClassicConfig
    else:
        root = LLMConfig
    run = raw.setdefault("run", {})
    if isinstance(run, dict) and not run.get("name"):  # not a table: validation says so
        run["name"] = Path(path).stem if path is not None else Path(BUILTIN_RECIPE).stem
    try:
        cfg = root.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_describe(err, source, root, origins)) from None
    cfg._source = source
    cfg._notes = notes
    return cfg


def _read(path: str | Path | None) -> tuple[str, dict[str, Any]]:
    if path is None:
        text = resources.files("ascent.recipes").joinpath(BUILTIN_RECIPE).read_text()
        source = BUILTIN_SOURCE
    else:
        p = Path(path)
        source = str(p)
        try:
            if not p.is_file():
                hint = " (it is a directory)" if p.is_dir() else ""
                raise ConfigError(f"{source}: config file not found{hint}; check the path")
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            line = err.object.count(b"\n", 0, err.start) + 1
            raise ConfigError(
                f"{source}: line {line} is not UTF-8 text (byte {err.object[err.start]:#04x}); "
                "save the config as UTF-8"
            ) from None
        except OSError as err:  # e.g. a name too long, no permission
            raise ConfigError(
                f"{source}: cannot read the config ({err.strerror}); check the path"
            ) from None
    try:
        return source, tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{source}: TOML syntax error: {err}") from None
    except RecursionError:
        raise ConfigError(
            f"{source}: arrays or tables nested too deeply to read; flatten them"
        ) from None
    except ValueError:  # int() refuses more than sys.get_int_max_str_digits() digits
        raise ConfigError(f"{source}: an integer is too long; {_INT64_RULE}") from None


_INT64 = 2**63
_INT64_RULE = "TOML integers are 64-bit (-2**63 to 2**63 - 1)"


def _huge_integer_at(node: Any) -> tuple[str, ...] | None:
    """The key path of an integer in `node` beyond 64 bits, or None. (A loop, not recursion:
    TOML nests arrays about as deep as Python's recursion limit allows.)"""
    todo: list[tuple[tuple[str, ...], Any]] = [((), node)]
    while todo:
        where, node = todo.pop()
        if isinstance(node, dict):
            todo += [((*where, str(k)), v) for k, v in node.items()]
        elif isinstance(node, list):
            todo += [(where, v) for v in node]
        elif isinstance(node, int) and not -_INT64 <= node < _INT64:
            return where
    return None


def _refuse_huge_integers(raw: dict[str, Any], source: str) -> None:
    """Refuse integers TOML cannot hold, as the TOML spec asks of a reader; they would
    otherwise reach the validators (and their messages) as numbers of 1000 digits."""
    where = _huge_integer_at(raw)
    if where is not None:
        key = f"{_section_label(where[:-1])} {where[-1]}" if len(where) > 1 else where[0]
        raise ConfigError(f"{source}: {key}: integer out of range; {_INT64_RULE}")


def _apply_override(raw: dict[str, Any], item: str) -> str:
    """Apply one `section.key=value` override in place; the value is parsed as TOML."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"--set {item!r}: expected section.key=value, e.g. --set optim.lr=1e-5")
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text.strip()  # a bare word: treat as a string, as a shell user would expect
    except (RecursionError, ValueError):
        raise ConfigError(
            f"--set {key}: the value is nested too deeply or has too many digits; simplify it"
        ) from None
    if _huge_integer_at(value) is not None:
        raise ConfigError(f"--set {key}: integer out of range; {_INT64_RULE}")
    *parents, leaf = key.split(".")
    node = raw
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: '{part}' is a value, not a section")
        node = child
    node[leaf] = value
    return key


def _section_label(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc if not isinstance(p, int)]
    return "[" + ".".join(parts) + "]" if parts else "top level"


def _model_at(root: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The section model a location points into (for did-you-mean on unknown keys)."""
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) else None
        if field is None:
            return None
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        candidates = [ann, *args]
        nxt = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
        if nxt is None:  # list[Section] and similar
            inner = [a for c in args for a in getattr(c, "__args__", ())]
            nxt = next((c for c in inner if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nxt is None:
            return None
        model = nxt
    return model


def _bracketed(hint: str) -> str:
    """` (did you mean 'optim'?)` -> ` (did you mean [optim]?)` for section names."""
    return hint.replace("'", "[", 1).replace("'", "]", 1) if hint else hint


def _describe(
    err: ValidationError, source: str, root: type[BaseModel], origins: dict[str, str]
) -> str:
    """Turn the first pydantic error into `file: [section] key: what is wrong; how to fix`."""
    first = err.errors(include_url=False)[0]
    loc = [p for p in first["loc"]]
    kind = first["type"]
    dotted = ".".join(str(p) for p in loc if not isinstance(p, int))
    named = re.match(r"Value error, \[([\w.]+)\] (\w+):", first["msg"])
    if named:  # cross-section checks name their key in the message itself
        dotted = f"{named.group(1)}.{named.group(2)}"
    came_from = [o for key, o in origins.items() if key == dotted or key.startswith(dotted + ".")]
    origin = f" (from {came_from[0]})" if dotted and came_from else ""
    more = len(err.errors()) - 1
    tail = f" ({more} more error{'s' if more > 1 else ''} after this one)" if more else ""
    if kind == "extra_forbidden":
        parent = _model_at(root, loc[:-1])
        valid = list(parent.model_fields) if parent else []
        name = str(loc[-1])
        if len(loc) == 1:
            msg = (
                f"unknown section [{name}]{_bracketed(did_you_mean(name, valid))}; "
                f"valid sections: {', '.join(valid)}"
            )
        else:
            msg = (
                f"unknown key '{name}' in {_section_label(loc[:-1])}{did_you_mean(name, valid)}; "
                f"valid keys: {', '.join(valid)}"
            )
        return f"{source}: {msg}{origin}{tail}"
    text = first["msg"]
    if text.startswith("Value error, "):
        return f"{source}: {text[len('Value error, ') :]}{origin}{tail}"
    got = first.get("input")
    shown = json.dumps(got) if isinstance(got, (str, int, float, bool)) else None
    field = str(loc[-1]) if loc else ""
    label = _section_label(loc[:-1])
    text = text[0].lower() + text[1:] if text else text
    text = text.replace("input should be", "must be")
    got_text = f" (got {shown})" if shown is not None else ""
    if kind == "model_type":  # a value where a section belongs: `run = 1`
        header = f"[[{dotted}]]" if isinstance(loc[-1], int) else f"[{dotted}]"
        return (
            f"{source}: {dotted} must be a table of keys, not a value{got_text}; write it as a "
            f"{header} section{origin}{tail}"
        )
    return f"{source}: {label} {field}: {text}{got_text}; fix the value{origin}{tail}"


def dump_config(cfg: AnyConfig, fmt: str = "toml") -> str:
    """The resolved config as TOML (unset keys listed in a trailing comment) or JSON."""
    data = cfg.model_dump(mode="json", by_alias=True)
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    unset: list[str] = []

    def strip_none(node: Any, prefix: str) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if v is None:
                    unset.append(f"{prefix}{k}")
                else:
                    out[k] = strip_none(v, f"{prefix}{k}.")
            return out
        if isinstance(node, list):
            return [strip_none(v, prefix) for v in node]
        return node

    body = tomli_w.dumps(strip_none(data, ""))
    kind = "classic PPO" if isinstance(cfg, ClassicConfig) else "LLM"
    head = f"# resolved config ({kind} run) from {cfg.source}\n"
    head += "".join(f"# {note}\n" for note in cfg._notes)
    head += "".join(f"# warning: {warning}\n" for warning in cfg.warnings)
    foot = f"\n# unset (use their documented behaviour): {', '.join(unset)}\n" if unset else ""
    return head + body + foot
