"""TOML file + `--set` overrides -> a validated config, or one line saying what to fix.

A config with an `[env]` section is a classic PPO run (`ClassicConfig`); anything else is an
LLM run (`LLMConfig`). With no file, the built-in demo recipe shipped in `ascent/recipes/` is
used, so `ascent train` works out of the box.
"""

from __future__ import annotations

import errno
import json
import re
import stat
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import tomli_w
from pydantic import BaseModel, ValidationError

from ascent.configfile import aliases
from ascent.configfile.settings_json import SETTINGS_FILE, merge_settings_json
from ascent.errors import ConfigError, did_you_mean
from ascent.rules import ClassicConfig, LLMConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

AnyConfig = LLMConfig | ClassicConfig
BUILTIN_RECIPE = "default.toml"
YAML_SUFFIXES = (".yaml", ".yml")  # configs ascent refuses to load: migrate them
M = TypeVar("M", bound=BaseModel)
BUILTIN_SOURCE = "<built-in default>"


def _not_a_file(p: Path) -> str:
    """Why `p` is no config file, in the words a user can act on."""
    try:
        mode = p.stat().st_mode
    except ValueError:  # a NUL byte in the name
        return "not a usable path (it holds a NUL byte)"
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symlink loop, not a config file"
        return "config file not found" if err.errno == errno.ENOENT else err.strerror
    if stat.S_ISDIR(mode):
        return "config file not found (it is a directory)"
    if stat.S_ISFIFO(mode):
        return "a FIFO, not a config file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a config file"
    return "not a regular file, not a config file"


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> AnyConfig:
    """Read, override and validate a config; raise `ConfigError` with a one-line message."""
    source, raw = _read(path)
    _refuse_huge_integers(raw, source)
    override_keys = set()
    for item in overrides:
        key = _apply_override(raw, item)
        override_keys.add(key)
    notes: list[str] = []
    warnings: list[str] = []  # settings.json's paths ascent does not follow
    origins = {key: "--set" for key in override_keys}  # where a key's value came from
    if "env" in raw:
        config_path = Path(path) if path is not None else None
        given = raw.get("run")
        raw, notes, warnings = merge_settings_json(raw, config_path)
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
    return _validate(raw, source, root, origins, notes, warnings)


TRUST_KEY = "model.trust_remote_code"


def load_run_config(run_dir: Path, overrides: Sequence[str] = ()) -> tuple[AnyConfig, list[str]]:
    """A run directory's config.toml, for commands that read a finished run (`ascent eval`,
    `ascent data grade --policy`) or continue one (`ascent train --resume RUN`), and
    warnings for what was not taken from it (`run_config_overrides`)."""
    sets, warnings = run_config_overrides(run_dir, overrides)
    return load_config(run_dir / "config.toml", sets), warnings


def run_config_overrides(
    run_dir: Path, overrides: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """The `--set`s to load a run directory's config.toml with, and why they differ from the
    ones given.

    `[model] trust_remote_code` is never taken from a run directory: a shared or tampered one
    could ship a model directory whose Python would run. It holds for an invocation only when
    that invocation says so (`--set model.trust_remote_code=true`)."""
    raw = read_toml(run_dir / "config.toml")
    given = any(item.split("=", 1)[0].strip() == TRUST_KEY for item in overrides)
    model = raw.get("model")
    saved = model.get("trust_remote_code") if isinstance(model, dict) else None
    # env: classic PPO (no language model); a [model] that is no table fails on its own
    lm = "env" not in raw and isinstance(raw.get("model", {}), dict)
    forced = [f"{TRUST_KEY}=false"] if lm and not given else []
    warnings = []
    if saved is True and not given:
        warnings.append(
            f"{run_dir}/config.toml sets [model] trust_remote_code = true; not taken from a run "
            f"directory (its model's Python would run): pass --set {TRUST_KEY}=true to allow it "
            "for this command"
        )
    return [*overrides, *forced], warnings


def config_from_data(raw: dict[str, Any], source: str) -> AnyConfig:
    """Validate config data already read (no file, no settings.json, no overrides); raise
    `ConfigError` with the same one-line message `load_config` gives."""
    _refuse_huge_integers(raw, source)
    root: type[BaseModel] = ClassicConfig if "env" in raw else LLMConfig
    return _validate(raw, source, root, {}, [])


def _validate(
    raw: dict[str, Any],
    source: str,
    root: type[BaseModel],
    origins: dict[str, str],
    notes: list[str],
    warnings: Sequence[str] = (),
) -> AnyConfig:
    try:
        cfg = root.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_describe(err, source, root, origins)) from None
    cfg._source = source
    cfg._notes = notes
    cfg._warnings = [*warnings, *cfg._warnings]
    return cfg


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML config file as a dict (no validation); one-line `ConfigError` when unreadable."""
    return _read(path)[1]


def _read(path: str | Path | None) -> tuple[str, dict[str, Any]]:
    if path is None:
        text = resources.files("ascent.recipes").joinpath(BUILTIN_RECIPE).read_text()
        source = BUILTIN_SOURCE
    else:
        p = Path(path)
        source = str(p)
        if p.suffix.lower() in YAML_SUFFIXES and p.is_file():
            raise ConfigError(
                f"{source}: ascent configs are TOML; `ascent config migrate {source}` rewrites "
                "this YAML as an ascent config"
            )
        try:
            if not p.is_file():
                raise ConfigError(f"{source}: {_not_a_file(p)}; check the path")
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


def _kind(root: type[BaseModel]) -> aliases.Kind:
    return "classic" if root is ClassicConfig else "llm"


def _alias_hint(key: str, section: str, kind: aliases.Kind) -> str:
    """` (did you mean [rollout] group_size? TRL's ...)` for a key ascent does not know in
    `section`: a write-up's, TRL's or verl's name, or ascent's own name in another section."""
    found = aliases.resolve(key, section, kind)
    if found is None:
        return ""
    if isinstance(found, tuple):
        return f" (did you mean {aliases.labels(found)}?)"
    if not found.targets:
        return f" (no ascent equivalent: {found.note}; remove it)"
    note = f" {found.note}" if found.note else ""
    return f" (did you mean {aliases.labels(found.targets)}?{note})"


def _key_hint(name: str, loc: Sequence[Any], root: type[BaseModel], valid: list[str]) -> str:
    """Where an unknown key belongs: an alias or the same name in another section, else the
    closest key of this section."""
    section = ".".join(str(p) for p in loc if not isinstance(p, int))
    return _alias_hint(name, section, _kind(root)) or did_you_mean(name, valid)


def _section_hint(
    name: str, table: Any, root: type[BaseModel], source: str, valid: list[str]
) -> str:
    """A section the write-ups use (`[grpo]`, `[training]`): where each of its keys goes and
    how to rewrite the file; a typo of an ascent section: the section meant."""
    note = aliases.section_note(name)
    close = _bracketed(did_you_mean(name, valid))
    if note is None and close:
        return close
    parts = []
    for key in table if isinstance(table, dict) else ():
        found = aliases.resolve(str(key), name, _kind(root))
        targets = found.targets if isinstance(found, aliases.Alias) else found
        if found is not None:
            parts.append(f"{key} -> {aliases.labels(targets) or 'no equivalent'}")
    if not parts and note is None:
        return ""
    shown = ", ".join(parts[:8]) + (f" and {len(parts) - 8} more" if len(parts) > 8 else "")
    keys = f"; here {shown}" if shown else ""
    rewrite = f"; `ascent config migrate {source}` rewrites the file"
    rewrite = rewrite if source != BUILTIN_SOURCE else ""
    return f" ({note or f'ascent has no [{name}]'}{keys}{rewrite})"


def sections_from_sets(model: type[M], sets: Sequence[str], applies: str) -> M:
    """`--set` items applied to `model` alone: the few sections a command reads when it is
    given no config file. Mistakes get the loader's one-line messages; a section the command
    does not read says which do (`applies`)."""
    raw: dict[str, Any] = {}
    for item in sets:
        _apply_override(raw, item)
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        if first["type"] == "extra_forbidden" and len(first["loc"]) == 1:  # a whole section
            section = first["loc"][0]
            raise ConfigError(f"--set: [{section}] does not apply here; {applies}") from None
        raise ConfigError(_describe(err, "--set", model, {})) from None


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
        valid = [f.alias or k for k, f in parent.model_fields.items()] if parent else []
        name = str(loc[-1])
        given = first.get("input")
        top_hint = _alias_hint(name, "", _kind(root)) if len(loc) == 1 else ""
        if len(loc) == 1 and not isinstance(given, dict) and top_hint:  # flat, as TRL writes
            msg = (
                f"unknown key '{name}' at the top level{top_hint}; ascent's keys live in "
                f"sections: {', '.join(valid)}"
            )
        elif len(loc) == 1:
            hint = _section_hint(name, given, root, source, valid)
            msg = f"unknown section [{name}]{hint}; valid sections: {', '.join(valid)}"
        else:
            msg = (
                f"unknown key '{name}' in {_section_label(loc[:-1])}"
                f"{_key_hint(name, loc[:-1], root, valid)}; valid keys: {', '.join(valid)}"
            )
        return f"{source}: {msg}{origin}{tail}"
    text = first["msg"]
    if text.startswith("Value error, "):
        msg = text[len("Value error, ") :]
        if loc and not msg.startswith("["):  # a section's own check: say where it is
            section = _model_at(root, loc) is not None  # a whole section, or one of its keys
            where = _section_label(loc) if section else f"{_section_label(loc[:-1])} {loc[-1]}:"
            msg = f"{where} {msg}"
        return f"{source}: {msg}{origin}{tail}"
    got = first.get("input")
    shown = json.dumps(got) if isinstance(got, (str, int, float, bool)) else None
    field = str(loc[-1]) if loc else ""
    label = _section_label(loc[:-1])
    text = text[0].lower() + text[1:] if text else text
    text = text.replace("input should be", "must be")
    got_text = f" (got {shown})" if shown is not None else ""
    if kind == "model_type":  # a value where a section belongs: `run = 1`
        header = f"[[{dotted}]]" if isinstance(loc[-1], int) else f"[{dotted}]"
        hint = _alias_hint(dotted, "", _kind(root)) if len(loc) == 1 else ""  # TRL's optim
        return (
            f"{source}: {dotted} must be a table of keys, not a value{got_text}{hint}; write it "
            f"as a {header} section{origin}{tail}"
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
