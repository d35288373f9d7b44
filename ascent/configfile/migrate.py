"""`ascent config migrate`: a config from the write-ups or TRL (TOML or YAML) as ascent's.

Every key of the file ends in one of four places, and the output says which:

- kept: an ascent key where ascent has it (no comment needed);
- moved: written under another name or in another section (`aliases.ALIASES`, or the same
  name in another section), its value converted where the alias says how: an inline comment
  names where it came from;
- left out: a concept ascent has no key for, a setting the chosen advantage estimator does
  not read, or a second key for a value another key already sets: listed in the header, why;
- not mapped: a key nobody knows, a value with no ascent form (or none in TOML: YAML's null
  inside a list, `!!set`, `!!binary`), or a secret (a key-shaped string, or any value of a
  name such as `api_key`, shown masked and never written): listed in the header.

A few settings the file implies are added, each with a comment (agentic episodes on when it
sets multi-turn keys, the reward functions of the reward tables it fills, a cap on replayed
completions' importance weights). A classic PPO config's `settings.json` (ascent's flat shape
or the write-up's nested one) is folded in below the TOML's own keys, and the header says
what ascent does with it when the result is saved beside it. The result is validated as
`ascent config show` would (merged with that settings.json, as it will be read); when it does
not load, the text is still produced, with the reason, for the user to finish by hand. TRL's
step counts (optimiser steps) become rollout batches: divided by num_iterations, rounded up.
`migrate_read.py` reads the file; `migrate_toml.py` writes the commented TOML.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ascent.configfile import aliases
from ascent.configfile.aliases import Alias, Kind, label
from ascent.configfile.loader import YAML_SUFFIXES, config_from_data, tomllib
from ascent.configfile.migrate_read import read_any
from ascent.configfile.migrate_toml import emit, nest, tomlable
from ascent.configfile.settings_json import (
    SETTINGS_FILE,
    check_endpoints,
    merge_settings_json,
    read_settings,
)
from ascent.errors import AscentError, one_line
from ascent.hub_ids import hub_id_hint
from ascent.secrets import holds_secret, redact, secret_name, shown

KEPT, SAME_NAME, ALIAS, IMPLIED = 0, 1, 2, 3  # who wins a key two sources set: lowest first
SETTINGS_RANK = 10  # settings.json loses to the TOML, as when ascent reads it


@dataclass
class Assignment:
    """One ascent key set from the file."""

    target: str  # dotted: "algorithm.clip_low"
    value: Any
    origin: str  # where it was written: "[grpo] clip_ratio"
    rank: int
    note: str = ""
    also: list[str] = field(default_factory=list)  # other keys that gave the same value


@dataclass
class Migration:
    """What `migrate` made of a file: the TOML text, and the ledger behind its comments."""

    text: str
    kind: Kind
    values: dict[str, Any]  # dotted ascent key -> value, as written out
    left_out: list[tuple[str, str]]  # ("[grpo] lam = 0.95", why)
    not_mapped: list[tuple[str, str]]
    problem: str | None  # why the result does not load yet; None when it does


def _flat(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            yield str(key), value
            yield from _flat(value)


class _Migrator:
    def __init__(self, kind: Kind, context: Mapping[str, Any]) -> None:
        self.kind = kind
        self.context = context
        self.sections = aliases.sections(kind)
        self.assigned: list[Assignment] = []
        self.left_out: list[tuple[str, str]] = []
        self.not_mapped: list[tuple[str, str]] = []
        self.comments: dict[str, tuple[str, str]] = {}  # key -> (where from, how)
        self.endpoints: list[tuple[str, Any, int]] = []  # [service] endpoints: `_fit_versions`

    def table(self, table: Mapping[str, Any], section: str, where: str, rank: int) -> None:
        model = self.sections.get(section) if section else aliases.root_model(self.kind)
        for key, value in table.items():
            self.key(str(key), value, section, model, where, rank)

    def key(self, key: str, value: Any, section: str, model: Any, where: str, rank: int) -> None:
        dotted = f"{section}.{key}" if section else key
        origin = f"{where}[{section}] {key}" if section else f"{where}{key}"
        if value is None:
            self.left_out.append((f"{origin} = null", "no TOML form; the default applies"))
            return
        if "." in key:  # dotted targets could not tell it from a sub-table
            self.unmapped(origin, value, "a name with a dot in it is no ascent key")
            return
        known = model is not None and (
            key in aliases.keys_of(model) or model.model_config.get("extra") == "allow"
        )
        if known and dotted in self.sections and isinstance(value, Mapping):
            self.table(value, dotted, where, rank)
            return
        if known and dotted not in self.sections:  # (a value where a section belongs: aliases)
            self.assign(dotted, value, origin, KEPT + rank)
            return
        if key == "endpoints" and section == "service":  # depends on the API root: settled later
            self.endpoints.append((origin, value, rank))
            return
        note = ""
        if key in aliases.TRL_STEP_KEYS and "num_iterations" in self.context:
            try:
                value, note = aliases.per_generation(key, value, self.context)
            except ValueError as err:
                self.unmapped(origin, value, str(err))
                return
        found = aliases.resolve(key, section, self.kind)
        if isinstance(found, Alias):
            self.alias(found, value, origin, rank, note)
        elif found is not None:
            self.assign(found[0], value, origin, SAME_NAME + rank, note)
        elif isinstance(value, Mapping):
            self.table(value, dotted, where, rank)
        else:
            why = aliases.section_note(section.split(".")[0]) if section else None
            self.unmapped(origin, value, why or "no ascent key of this name")

    def unmapped(self, origin: str, value: Any, why: str) -> None:
        """List a key as not mapped; a secret's name says where the secret goes instead."""
        if secret_name(origin):
            why = f"{why}; {self.secret_home(origin)}"
        self.not_mapped.append((f"{origin} = {shown(value, name=origin)}", why))

    def secret_home(self, origin: str) -> str:
        """Where a secret found in the file belongs: never in a config, which is shared."""
        var = self.context.get("api_key_env")
        if not isinstance(var, str) or not var or holds_secret(var):
            var = _default(aliases.sections(self.kind), "api.api_key_env")
        if origin.removeprefix(f"{SETTINGS_FILE} ") in (
            "api_key",
            "[api] api_key",
            "[service] api_key",
        ):
            return (
                f"a key does not go in a config: put it in the environment variable that [api] "
                f"api_key_env names ({var}), or in .env beside the config"
            )
        return "a secret does not go in a config: keep it in an environment variable or .env"

    def alias(self, alias: Alias, value: Any, origin: str, rank: int, note: str = "") -> None:
        try:
            values = alias.values(value, self.context)
        except (ValueError, TypeError) as err:
            why = str(err) if isinstance(err, ValueError) else "a value of the wrong type"
            self.unmapped(origin, value, f"{why}; {alias.note}")
            return
        missing = [t for t in values if not aliases.is_key(t, self.kind)]
        if missing:
            why = f"{label(missing[0])} is not part of a {self.kind} run"
            self.unmapped(origin, value, why)
            return
        if not values:
            self.left_out.append((f"{origin} = {shown(value, name=origin)}", alias.note))
        for target, converted in values.items():
            weak = IMPLIED if target in alias.weak else ALIAS
            self.assign(target, converted, origin, weak + rank, note or alias.note)

    def assign(self, target: str, value: Any, origin: str, rank: int, note: str = "") -> None:
        """Set an ascent key, unless TOML cannot hold the value (YAML's null inside a list,
        `!!set`, `!!binary`) or it is a secret, which the output must not carry."""
        if not tomlable(value):
            self.unmapped(origin, value, "no TOML form (a null inside it, a set or binary data)")
        elif holds_secret(value, origin) and target.endswith("api_key_env"):
            self.unmapped(
                origin,
                value,
                f"looks like an API key, not a variable's name: put the key in an environment "
                f"variable (or .env) and write that variable's NAME as {label(target)}",
            )
        elif holds_secret(value, origin):
            self.unmapped(
                origin,
                value,
                "looks like a secret, which a config must not hold: put it in an environment "
                "variable (or .env) and name the variable where the config takes one",
            )
        else:
            self.assigned.append(Assignment(target, value, origin, rank, note))

    def settle(self) -> dict[str, Assignment]:
        """One value per ascent key: the lowest rank wins, then the first written."""
        out: dict[str, Assignment] = {}
        for item in sorted(self.assigned, key=lambda a: a.rank):
            winner = out.get(item.target)
            if winner is None:
                out[item.target] = item
            elif winner.value == item.value:
                winner.also.append(item.origin)
            else:
                self.left_out.append(
                    (
                        f"{item.origin} = {shown(item.value, name=item.origin)} as "
                        f"{label(item.target)}",
                        f"{winner.origin} = {shown(winner.value, name=winner.origin)} sets it",
                    )
                )
        return out

    def drop(self, values: dict[str, Assignment], target: str, why: str) -> None:
        item = values.pop(target)
        for origin in [item.origin, *item.also]:
            self.left_out.append((f"{origin} = {shown(item.value, name=origin)}", why))

    def add(self, values: dict[str, Assignment], target: str, value: Any, why: str) -> None:
        values[target] = Assignment(target, value, "", KEPT)
        self.comments[target] = (f"added: {why}", "")


def _default(sections: Mapping[str, Any], target: str) -> Any:
    section, _, key = target.rpartition(".")
    return sections[section].model_fields[key].default


def _replay_fit(ratio: float, batch: int, group: int) -> float | None:
    """The replay ratio nearest `ratio` that leaves whole groups fresh; None if none does."""
    options = [k * group / batch for k in range(1, batch // group)]
    return min(options, key=lambda r: (abs(r - ratio), r)) if options else None


def _fit_endpoint(m: _Migrator, values: dict[str, Assignment]) -> None:
    """base_url and base_url_env are exclusive: the variable wins (the write-ups keep the URL
    in .env beside the key), unless base_url came from the file itself and the variable only
    from settings.json."""
    url, var = values.get("api.base_url"), values.get("api.base_url_env")
    if url is None or var is None:
        return
    if url.rank < SETTINGS_RANK <= var.rank:
        m.drop(values, "api.base_url_env", "[api] base_url is given (the two are exclusive)")
    else:
        m.drop(
            values,
            "api.base_url",
            f"[api] base_url_env reads it from {var.value} (put it there, or in .env)",
        )


def _fit_versions(m: _Migrator, values: dict[str, Assignment]) -> None:
    """[service] endpoints say which paths the API root serves. Read as the loader reads
    settings.json's (`check_endpoints`): version-less ones under a version-less base_url are
    [api] append_v1 = false; ones ascent would not request are not mapped; the rest agree
    with what ascent requests and are left out."""
    given = sorted(m.endpoints, key=lambda e: e[2])  # the file's before settings.json's
    for n, (origin, value, rank) in enumerate(given):
        row = f"{origin} = {shown(value, name=origin)}"
        if n:
            m.left_out.append((row, f"{given[0][0]} is read"))
            continue
        if "api.base_url_env" in values:
            root: Any = None  # the variable gives it when the run starts: not checked
        elif "api.base_url" in values:
            root = values["api.base_url"].value
        else:
            root = _default(m.sections, "api.base_url")
        if not isinstance(root, (str, type(None))):
            m.left_out.append((row, "[api] base_url is not a URL (validation reports it)"))
            continue
        implied, why, refusal = check_endpoints(value, root)
        if refusal:
            m.not_mapped.append((row, refusal))
        elif implied and "api.append_v1" in values:
            item = values["api.append_v1"]
            m.left_out.append((row, f"{item.origin or 'the file'} sets [api] append_v1"))
        elif implied:
            values["api.append_v1"] = Assignment(
                "api.append_v1",
                False,
                origin,
                IMPLIED + rank,
                "paths without a version under a base_url without one: ascent adds no /v1",
            )
        else:
            m.left_out.append((row, why or aliases.find("endpoints", "service", m.kind).note))


def _fit_llm(m: _Migrator, values: dict[str, Assignment]) -> None:
    """Make what the file asks for load: drop what the chosen parts cannot use, add what
    they need."""
    from ascent.algos import ADVANTAGES

    def value(target: str) -> Any:
        return values[target].value if target in values else _default(m.sections, target)

    adv = value("algorithm.advantage")
    meta = ADVANTAGES.meta(adv) if isinstance(adv, str) and adv in ADVANTAGES else None
    agentic = any(t.startswith("agentic.") and a.rank != KEPT for t, a in values.items())
    if meta is not None and (agentic or value("agentic.enabled")) and f"turn_{adv}" in ADVANTAGES:
        meta = ADVANTAGES.meta(f"turn_{adv}")  # episodes are credited per turn
    if meta is not None:
        for param in ("gamma", "lam", "lam_critic", "length_alpha", "std_eps"):
            if f"algorithm.{param}" in values and param not in meta.get("uses", ()):
                m.drop(values, f"algorithm.{param}", f'advantage "{adv}" does not read {param}')
        if not meta.get("needs_values"):
            for target in [t for t in values if t.startswith("critic.")]:
                m.drop(values, target, f'advantage "{adv}" uses no critic')
    moved_in = [t for t, a in values.items() if t.startswith("agentic.") and a.rank != KEPT]
    if moved_in and "agentic.enabled" not in values:  # a write-up's multi-turn keys
        m.add(values, "agentic.enabled", True, "the multi-turn keys act only in agentic episodes")
    tables = [n for n in ("math", "code") if any(t.startswith(f"reward.{n}.") for t in values)]
    moved_in = [t for t, a in values.items() if t.startswith("reward.") and a.rank != KEPT]
    if moved_in and "reward.functions" not in values and tables not in ([], ["math"]):
        m.add(values, "reward.functions", tables, "the rewards whose settings the file gives")
    pattern = value("reward.math.answer_pattern")
    if "reward.math.answer_pattern" in values and "boxed" in str(pattern):
        m.drop(
            values,
            "reward.math.answer_pattern",
            "ascent's default (empty) takes the last \\boxed{...}, nested braces included",
        )
    if values.get("sampling.replay_ratio") and values["sampling.replay_ratio"].value:
        _fit_replay(m, values, meta, adv, value)


def _fit_classic(m: _Migrator, values: dict[str, Assignment]) -> None:
    """A write-up that gives learning rates and says nothing of a schedule keeps them
    constant; ascent's default anneals them linearly to 0, so the migrated file says so.
    (An ascent config, every key already in place, comes through unchanged.)"""
    foreign = any(KEPT < a.rank < SETTINGS_RANK for a in values.values())  # a key moved
    rates = [t for t in ("optim.lr_actor", "optim.lr_critic") if t in values]
    if foreign and rates and "optim.anneal_lr" not in values:
        m.add(
            values,
            "optim.anneal_lr",
            False,
            "the file's learning rates are constant, as it gives no schedule (ascent's "
            "default decays them linearly to 0)",
        )


def _fit_replay(m: _Migrator, values: dict[str, Assignment], meta: Any, adv: Any, value) -> None:
    item = values["sampling.replay_ratio"]
    if meta is not None and meta.get("needs_groups"):
        m.drop(
            values,
            "sampling.replay_ratio",
            f'advantage "{adv}" compares the completions of one prompt and a replayed one has '
            "no group (gae and length_adaptive_gae replay)",
        )
        return
    batch, group = value("train.batch_size"), value("rollout.group_size")
    if not all(isinstance(v, int) and v > 0 for v in (batch, group)):
        return  # validation reports them
    fitted = _replay_fit(float(item.value), batch, group)
    if fitted is None:
        m.drop(values, "sampling.replay_ratio", f"batch_size {batch} holds one group of {group}")
        return
    if abs(fitted - item.value) > 1e-12:
        m.comments["sampling.replay_ratio"] = (
            f"from {item.origin} = {shown(item.value, name=item.origin)}",
            f"{item.value} x batch_size {batch} is {item.value * batch:g} completions; replayed "
            f"rows must leave whole groups of {group} fresh, so {fitted * batch:g}",
        )
        item.value = fitted
    if "algorithm.is_cap" not in values:
        m.add(
            values,
            "algorithm.is_cap",
            2.0,
            "replayed completions come from older policies: their importance weights are "
            "capped (examples/vapo.toml)",
        )


def _comment(item: Assignment) -> tuple[str, str]:
    """(where from, how) for a key's inline comment; empty for a key kept where it was."""
    section, _, key = item.target.rpartition(".")
    if item.origin == (f"[{section}] {key}" if section else key) and not item.also:
        return "", ""
    return f"from {', '.join([item.origin, *item.also])}", item.note


def migrate_data(data: dict[str, Any], source: str, settings: dict[str, Any] | None) -> Migration:
    """Migrate config data read from `source` (and a classic run's settings.json)."""
    kind: Kind = "classic" if "env" in data else "llm"
    context = dict(reversed(list(_flat(data))))  # first occurrence of each name wins
    # (settings.json's names are not among them: its keys convert without the file's)
    m = _Migrator(kind, context)
    m.table(data, "", "", 0)
    if settings is not None:
        m.table(settings, "", f"{SETTINGS_FILE} ", SETTINGS_RANK)
    values = m.settle()
    _fit_endpoint(m, values)
    _fit_versions(m, values)
    if kind == "llm":
        _fit_llm(m, values)
    else:
        _fit_classic(m, values)
    for target, item in values.items():
        if item.origin:
            m.comments.setdefault(target, _comment(item))
    plain = {t: a.value for t, a in values.items()}
    body: list[str] = []
    emit(nest(plain, kind), (), m.comments, body, set())
    problem, warnings = _check("\n".join(body) + "\n", source, settings is not None)
    if kind == "llm":
        warnings = _unnamed(plain) + warnings
    text = "\n".join(_header(source, kind, m, settings, problem, warnings) + body).strip() + "\n"
    return Migration(text, kind, plain, m.left_out, m.not_mapped, problem)


def _unnamed(values: dict[str, Any]) -> list[str]:
    """What the file leaves to ascent's demo defaults, or names loosely: said in the header
    (and by `ascent train --dry-run`), never filled in silently."""
    notes = []
    model = values.get("model.name_or_path")
    if model is None:
        notes.append(
            "the file names no model: [model] name_or_path would be the built-in ascent:tiny "
            "(a 1 M-parameter demo); set it to your policy's hub id (owner/name) or directory"
        )
    elif isinstance(model, str) and (hint := hub_id_hint(model)) is not None:
        notes.append(
            f'[model] name_or_path "{model}" is not a hub id (owner/name): did you mean "{hint}"?'
        )
    if "data.path" not in values and "data.task" not in values:
        notes.append(
            "the file names no data: the built-in arithmetic task would train; set [data] path "
            "(a JSONL / Parquet file, a datasets directory or an ascent: set) or [data] task"
        )
    return notes


def _check(text: str, source: str, beside_settings: bool) -> tuple[str | None, list[str]]:
    """Load the result as `ascent config show` would: (why it does not load, or None; its
    warnings). With a settings.json folded in, the result is merged with that settings.json
    as the loader merges it when the file is saved beside it, so "loads with it" holds (a
    field the merge refuses, such as runtime.num_workers = 4, is the reason)."""
    try:
        raw = tomllib.loads(text)
        if beside_settings:  # the settings.json beside the source, read as the loader reads it
            raw = merge_settings_json(raw, Path(source))[0]
        cfg = config_from_data(raw, f"{source} (migrated)")
    except tomllib.TOMLDecodeError as err:
        return f"{source} (migrated): not valid TOML ({err}); please report this", []
    except AscentError as err:
        return str(err), []
    return None, cfg.warnings


def _header(
    source: str,
    kind: Kind,
    m: _Migrator,
    settings: dict[str, Any] | None,
    problem: str | None,
    warnings: list[str],
) -> list[str]:
    run = "classic PPO" if kind == "classic" else "LLM"
    lines = [
        f"# {Path(source).name} as an ascent config ({run} run), by `ascent config migrate`.",
        "# A key that moved or changed says where it came from; check the whole with",
        "# `ascent config show FILE`.",
    ]
    lines += _settings_lines(source, kind, settings is not None)
    for title, rows in (("Left out", m.left_out), ("Not mapped", m.not_mapped)):
        if rows:
            lines.append(f"# {title}:")
            lines += [f"#   {one_line(what)}: {one_line(redact(why))}" for what, why in rows]
    lines += [f"# warning: {one_line(w)}" for w in warnings]
    if problem is not None:
        lines.append(f"# does not load yet: {one_line(problem)}")
    return lines


def _settings_lines(source: str, kind: Kind, folded: bool) -> list[str]:
    """What ascent does with a settings.json beside the result (classic runs read one)."""
    if kind != "classic":
        return []
    if not folded:
        return [
            f"# A {SETTINGS_FILE} saved beside this file (output_dir, device, threads, "
            "deterministic) fills",
            "# the keys this file leaves out.",
        ]
    return [
        f"# The {SETTINGS_FILE} beside {Path(source).name} is folded in below. Saved beside that "
        f"{SETTINGS_FILE},",
        "# this file loads with it: ascent reads the settings.json beside the config it loads "
        "(this",
        "# file's keys win) and warns about each paths.config, checkpoint_dir or tensorboard that",
        "# differs from its own layout. Saved elsewhere, this file is used without it.",
    ]


def migrate_file(path: str | Path) -> Migration:
    """Migrate a TOML or YAML config (and a classic config's settings.json beside it)."""
    path = Path(path)
    data = read_any(path)
    settings = None
    beside = path.parent / SETTINGS_FILE
    if "env" in data and beside.is_file() and path.suffix.lower() not in YAML_SUFFIXES:
        settings = read_settings(beside)
    return migrate_data(data, str(path), settings)
