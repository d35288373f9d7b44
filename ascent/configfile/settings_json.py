"""The `settings.json` beside a classic PPO config: the machine's runtime settings.

It carries what differs between machines (where runs are written, device, threads,
deterministic kernels), so one recipe can be shared between them. `merge_settings_json` folds
it into the config data before validation; a key the TOML (or `--set`) gives wins, and
`ascent config show` prints where each value came from. Two shapes are read:

- ascent's flat one: `{"device": "cpu", "output_dir": "runs"}`, each key a `[run]` key;
- the actor-critic write-up's nested one (`project`, `version`, `paths`, `service`,
  `runtime`): a field with an ascent key fills it (`NESTED_KEYS`); a path of the write-up's
  own layout (`paths.config`, `checkpoint_dir`, `tensorboard`) that differs from where ascent
  puts that thing is a one-line warning naming where ascent puts it (nothing is written
  there, so nothing is lost); any other field is accepted where it agrees with what ascent
  does and refused in one line where it does not.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

from ascent.config.api import VERSION_SEGMENT, ApiSection
from ascent.config.run import LoggingSection, RunSection
from ascent.errors import ConfigError, did_you_mean
from ascent.secrets import key_shaped, mask_secret, shown

SETTINGS_FILE = "settings.json"
# The flat shape: settings.json key -> [run] key. Checkpoints always live in
# <output_dir>/<name>/checkpoints, so "paths for logs and checkpoints" is the one output_dir.
SETTINGS_KEYS = {
    "output_dir": "output_dir",
    "device": "device",
    "threads": "threads",
    "deterministic": "deterministic",
}
# The write-up's nested shape: its tables and their fields.
NESTED_TABLES = {
    "paths": ("config", "log_dir", "checkpoint_dir", "tensorboard"),
    "service": ("provider", "base_url", "base_url_env", "api_key_env", "endpoints"),
    "runtime": ("device", "num_workers", "deterministic"),
}
# Its fields that have a key in ascent (the rest are checked against what ascent does).
NESTED_KEYS = {
    "project": "logging.project",
    "paths.log_dir": "run.output_dir",
    "service.base_url": "api.base_url",
    "service.base_url_env": "api.base_url_env",
    "service.api_key_env": "api.api_key_env",
    "runtime.device": "run.device",
    "runtime.deterministic": "run.deterministic",
}
# Paths of the write-up's layout, where ascent has a layout of its own.
LAYOUT_PATHS = ("paths.config", "paths.checkpoint_dir", "paths.tensorboard")
# A TOML key that sets what a settings.json key would (the TOML wins): the API root, given
# as a URL or as the variable holding it ([api] base_url and base_url_env are exclusive).
SAME_SETTING = {"api.base_url": "base_url_env", "api.base_url_env": "base_url"}
SETTINGS_SECTIONS: dict[str, type[BaseModel]] = {
    "run": RunSection,
    "logging": LoggingSection,
    "api": ApiSection,
}
OPENAI_PATHS = {"chat": "/chat/completions", "models": "/models"}

Taken = dict[str, tuple[str, Any]]  # an ascent key ("run.device") -> (the field, its value)


def read_settings(path: Path) -> dict[str, Any]:
    """A settings.json as a dict; a one-line `ConfigError` when it is not a JSON object."""
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: invalid JSON: {err}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text; save it as UTF-8 JSON") from None
    except (RecursionError, ValueError):  # ValueError: an integer of 4300+ digits
        raise ConfigError(f"{path}: nested too deeply or a number too long to read") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read it ({err.strerror}); fix or move it") from None
    if not isinstance(settings, dict):
        raise ConfigError(f'{path}: expected a JSON object such as {{"device": "cpu"}}')
    return settings


def merge_settings_json(
    raw: dict[str, Any], config_path: Path | None
) -> tuple[dict[str, Any], list[str], list[str]]:
    """Fold an optional settings.json beside the config into the raw TOML data (TOML wins).

    The flat shape is an object with any of: output_dir (where run directories with their logs
    and checkpoints go), device, threads, deterministic; each fills the `[run]` key of the same
    name. The write-up's nested shape maps project -> [logging] project, paths.log_dir ->
    [run] output_dir, runtime.device / deterministic -> [run], service.base_url /
    base_url_env / api_key_env -> [api]. paths.config, checkpoint_dir and tensorboard are
    noted where they agree with ascent's layout and warned about where they do not;
    service.provider and endpoints, runtime.num_workers and version are accepted where they
    agree with what ascent does, else refused, all in one line. A key the TOML or `--set`
    gives wins.
    Returns the merged data, a note per field (`ascent config show` prints them) and a
    warning per layout path ascent does not follow (`ascent train` prints them).
    """
    if config_path is None:
        return raw, [], []
    path = Path(config_path).parent / SETTINGS_FILE
    if not path.is_file():
        return raw, [], []
    fields = _settings_fields(read_settings(path), path)
    taken: Taken = {}
    for field, value in fields.items():
        target = f"run.{SETTINGS_KEYS[field]}" if field in SETTINGS_KEYS else NESTED_KEYS.get(field)
        if target is None:
            continue
        if target in taken:
            raise ConfigError(f"{path}: {taken[target][0]} and {field} both set {target}; keep one")
        if field not in SETTINGS_KEYS or (isinstance(value, str) and key_shaped(value)):
            _check_mapped(path, field, target, value)  # (the loader's own message quotes it)
        taken[target] = (field, value)
    agreed, checked, warned, refused = _agreements(fields, taken, raw, Path(config_path), path)
    if refused:
        raise ConfigError(
            f"{path}: {len(refused)} field(s) cannot be honoured: {'; '.join(refused)}"
        )
    warnings = [f"{path}: {why}" for why in warned]
    if not isinstance(raw.get("run", {}), dict):
        return raw, [], warnings  # [run] is not a table: validation reports it
    notes, merged = [], {**raw, "run": dict(raw.get("run", {}))}
    for target, (field, value) in (taken | agreed).items():
        section, key = target.split(".")
        table = raw.get(section, {})
        if not isinstance(table, dict):
            continue  # [run] = 1 and such: validation reports it
        origin = "" if field in SETTINGS_KEYS else field
        rival = SAME_SETTING.get(target, key)  # the TOML key that sets the same thing
        if key in table or rival in table:
            won = "" if rival == key else f"'s {rival}"
            origin = f"{origin}; " if origin else ""
            origin += f"overridden by the TOML{won}"
        quoted = shown(value, 10**6, field)
        notes.append(f"{target} = {quoted} from {path}" + (origin and f" ({origin})"))
        if rival not in table:
            merged[section] = {**merged.get(section, {}), key: value, **table}
    notes += [
        f"{field} = {shown(fields[field], 10**6, field)} from {path}: {why}"
        for field, why in checked
    ]
    return merged, notes, warnings


def _settings_fields(settings: dict[str, Any], path: Path) -> dict[str, Any]:
    """Both shapes as one mapping: "device", "runtime.device", "project", ... -> value."""
    valid = [*SETTINGS_KEYS, "project", "version", *NESTED_TABLES]
    fields: dict[str, Any] = {}
    for key, value in settings.items():
        if key not in valid:
            name = mask_secret(key) if key_shaped(key) else repr(key)
            raise ConfigError(
                f"{path}: unknown key {name}{did_you_mean(key, valid)}; valid keys: "
                f"{', '.join(valid)} (checkpoints are written under "
                "output_dir/<run name>/checkpoints)"
            )
        if key not in NESTED_TABLES:
            fields[key] = value
            continue
        names = NESTED_TABLES[key]
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: {key} must be an object with any of {', '.join(names)}")
        for sub, item in value.items():
            if sub not in names:
                name = f"{key}.{mask_secret(sub)}" if key_shaped(sub) else f"'{key}.{sub}'"
                raise ConfigError(
                    f"{path}: unknown key {name}{did_you_mean(sub, names)}; valid keys "
                    f"in {key}: {', '.join(names)}"
                )
            fields[f"{key}.{sub}"] = item
    return fields


def _check_mapped(path: Path, field: str, target: str, value: Any) -> None:
    """Validate one nested field against the ascent key it fills, naming the field."""
    section, key = target.split(".")
    try:
        SETTINGS_SECTIONS[section].model_validate({key: value})
    except ValidationError as err:
        msg = err.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
        msg = msg.removeprefix(f"[{section}] {key}: ").removeprefix(f"[{section}] {key} ")
        if isinstance(value, str) and value and key_shaped(value):  # validators quote it
            msg = msg.replace(repr(value), mask_secret(value)).replace(value, mask_secret(value))
        raise ConfigError(f"{path}: {field} -> [{section}] {key}: {msg}") from None


def _agreements(
    fields: dict[str, Any], taken: Taken, raw: dict[str, Any], config_path: Path, path: Path
) -> tuple[Taken, list[tuple[str, str]], list[str], list[str]]:
    """The nested fields with no key of their own, checked against what ascent does. Returns
    the keys some imply, (field, why it agrees) notes, a warning per layout path ascent does
    not follow, and a clause per field refused."""
    where = _run_dir(raw, taken, config_path)
    agreed: Taken = {}
    notes: list[tuple[str, str]] = []
    warned: list[str] = []
    refused: list[str] = []
    for field, value in fields.items():
        if field == "version":
            notes.append((field, "a label of the write-up's code; nothing in a run depends on it"))
        elif field == "service.provider":
            notes.append((field, "not needed; ascent talks to any OpenAI-compatible endpoint"))
        elif field == "service.endpoints":
            base_url = _api_root(raw, taken)
            if not isinstance(base_url, (str, type(None))):
                continue  # validation reports base_url
            implied, why, refusal = check_endpoints(value, base_url)
            agreed |= implied
            notes += [(field, why)] if why else []
            refused += [refusal] if refusal else []
        elif field == "runtime.num_workers":
            if value == 1 and type(value) is int:
                notes.append((field, "the environments step in the training process, as in ascent"))
            else:
                refused.append(
                    f"runtime.num_workers {shown(value)}: a classic run has no worker pool; for "
                    "environments in parallel processes set [env] num_envs and vectorization = "
                    '"async" (each env collects rollout_steps), for torch CPU threads [run] '
                    "threads; remove it"
                )
        elif field in LAYOUT_PATHS:
            if not isinstance(value, str) or not value:
                refused.append(f"{field} {shown(value)}: must be a path")
                continue
            agrees, why = _path_verdict(field, value, config_path, path.parent, where, raw)
            if agrees:
                notes.append((field, why))
            elif why:
                warned.append(why)
    return agreed, notes, warned, refused


def _run_dir(raw: dict[str, Any], taken: Taken, config_path: Path) -> tuple[str, str] | None:
    """(output_dir, run name) as the run will have them; None when either is not a string
    (validation reports it)."""
    run = raw.get("run") if isinstance(raw.get("run"), dict) else {}
    default = ("", RunSection.model_fields["output_dir"].default)
    output_dir = (
        run["output_dir"] if "output_dir" in run else taken.get("run.output_dir", default)[1]
    )
    name = run.get("name") or config_path.stem  # as the loader names the run
    return (output_dir, name) if isinstance(output_dir, str) and isinstance(name, str) else None


def _api_root(raw: dict[str, Any], taken: Taken) -> Any:
    """The API root the run will use (the TOML's, else settings.json's, else the default);
    None when a variable gives it when the run starts ([api] base_url_env)."""
    api = raw.get("api") if isinstance(raw.get("api"), dict) else {}
    if api.get("base_url_env"):
        return None
    if "base_url" in api:
        return api["base_url"]
    if taken.get("api.base_url_env", ("", ""))[1]:
        return None
    return taken.get("api.base_url", ("", ApiSection.model_fields["base_url"].default))[1]


def _abs(path: str, base: str | Path = "") -> str:
    return os.path.abspath(os.path.join(base, path))


def _tensorboard_on(raw: dict[str, Any]) -> bool:
    logging = raw.get("logging") if isinstance(raw.get("logging"), dict) else {}
    trackers = logging.get("trackers", [])
    return isinstance(trackers, list) and "tensorboard" in trackers


def _path_verdict(
    field: str,
    value: str,
    config: Path,
    settings_dir: Path,
    where: tuple[str, str] | None,
    raw: dict[str, Any],
) -> tuple[bool, str]:
    """(True, why it agrees) or (False, where ascent puts that thing instead) for a path of
    the write-up's layout; (False, "") when the output directory is itself invalid
    (validation reports that)."""
    quoted = shown(value)
    if field == "paths.config":
        if _abs(str(config)) in (_abs(value), _abs(value, settings_dir)):
            return True, "the config being loaded"
        return False, (
            f"paths.config {quoted} is not the config being loaded: ascent reads {config.name}, "
            "the config it is given, with the settings.json beside it"
        )
    if where is None:
        return False, ""
    run_dir = os.path.join(*where)
    if field == "paths.checkpoint_dir":
        expected = os.path.join(run_dir, "checkpoints")
        if _abs(value) == _abs(expected):
            return True, "where this run's checkpoints go (<output_dir>/<run name>/checkpoints)"
        return False, (
            f"paths.checkpoint_dir {quoted} is not used: checkpoints go in the run directory, "
            f"{expected} (<output_dir>/<run name>/checkpoints; paths.log_dir sets output_dir)"
        )
    if os.path.commonpath([_abs(value), _abs(run_dir)]) == _abs(value):
        return True, f"the run directory {run_dir} is under it (TensorBoard finds its logs)"
    files = os.path.join(run_dir, "tensorboard")
    if _tensorboard_on(raw):
        goes = f"TensorBoard files go in {files}; run tensorboard --logdir {where[0]}"
    else:
        goes = (
            f'TensorBoard files go in {files} with [logging] trackers = ["tensorboard"] '
            "(not set: none are written)"
        )
    return False, f"paths.tensorboard {quoted} is not used: {goes}"


def check_endpoints(value: Any, base_url: str | None) -> tuple[Taken, str, str]:
    """service.endpoints against what ascent requests: base_url (+ /v1 when base_url has no
    version and append_v1) + /chat/completions or /models. Returns (the keys it implies, why
    it agrees, why it is refused); a version-less endpoint under a version-less base_url
    means [api] append_v1 = false."""
    field = "service.endpoints"

    def refused(why: str) -> tuple[Taken, str, str]:
        return {}, "", f"{field}{why}"

    if not isinstance(value, dict) or not value:
        return refused(f' {shown(value)}: expected {{"chat": "/v1/chat/completions"}}')
    prefixes = set()
    for name, endpoint in value.items():
        suffix = OPENAI_PATHS.get(name)
        if suffix is None:
            return refused(f".{name}: ascent calls only the chat and models endpoints")
        ok = isinstance(endpoint, str) and endpoint.endswith(suffix)
        prefix = endpoint[: -len(suffix)].rstrip("/") if ok else ""
        if not ok or (prefix and not VERSION_SEGMENT.match(prefix[1:])):
            return refused(
                f".{name} {shown(endpoint)}: ascent requests [api] base_url + {suffix}; move "
                "the rest into base_url and remove endpoints"
            )
        prefixes.add(prefix)
    if base_url is None:
        return {}, "not checked: [api] base_url_env gives the API root when the run starts", ""
    if len(prefixes) > 1:
        return refused(": chat and models differ in version; ascent uses one API root")
    prefix = prefixes.pop()
    versioned = any(VERSION_SEGMENT.match(s) for s in urlsplit(base_url).path.split("/"))
    if not prefix and not versioned:
        return {"api.append_v1": (field, False)}, "", ""
    if not prefix or (prefix == "/v1" and not versioned):
        return {}, "the paths ascent requests under [api] base_url", ""
    if versioned:
        return refused(
            f": {base_url} has its version already, so {prefix}/chat/completions under it is "
            f"not a request ascent sends; write the endpoints without {prefix} or remove them"
        )
    return refused(
        f": ascent adds /v1, not {prefix}, to a version-less base_url; write "
        f"{base_url.rstrip('/')}{prefix} as [api] base_url and remove endpoints"
    )
