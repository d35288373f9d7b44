"""`ascent data clean IN --out OUT`: SRPO's data cleaning step from a shell.

IN is a JSONL (.jsonl, .jsonl.gz), Parquet or `datasets.save_to_disk` input, or a bundled set
(`ascent:gsm8k_test`). Kept rows go to OUT (JSONL) with their columns as read and their problem
text cleaned (`ascent.data.clean`); dropped rows go, as read, to OUT with `.dropped.jsonl` in
place of `.jsonl`, each with `drop_reason` and `drop_detail`. Both files are written whole or
not at all. A table of reasons is printed, and the last line is one JSON object:
{"kept": N, "dropped": N, "by_reason": {...}}.

Settings are the [clean], [reward] (math-verify's time limit, the default language) and
[sandbox] (where reference solutions run) sections of a `--config` file, whose [data.columns]
prompt and answer name a math row's columns; without one, the defaults (with `--set`).

`ascent data grade` samples from a policy, so it lives with the evaluation modes
(ascent.evaluation.commands) and the `ascent` command mounts it beside `clean`.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ascent.config.base import Section
from ascent.config.clean import CleanSection
from ascent.config.data import ColumnsSection
from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError
from ascent.names import DROP_REASONS

data_app = typer.Typer(
    help="Prepare data sets for RL: clean problems, grade them by difficulty.",
    no_args_is_help=True,
)

CHUNK = 64  # rows filtered together (their reference solutions are judged in parallel)


class _Sections(Section):
    """What `data clean` reads of a config when there is no config file."""

    clean: CleanSection = CleanSection()
    reward: RewardSection = RewardSection()
    sandbox: SandboxSection = SandboxSection()


@dataclass(frozen=True)
class CleanSettings:
    clean: CleanSection = field(default_factory=CleanSection)
    reward: RewardSection = field(default_factory=RewardSection)
    sandbox: SandboxSection = field(default_factory=SandboxSection)
    columns: ColumnsSection | None = None  # [data.columns] when a config names them
    split: str = "train"  # the split of a datasets DatasetDict


def load_settings(config: Path | None, sets: list[str] | None) -> CleanSettings:
    """A config file's sections (with `--set` overrides), or the defaults with the overrides."""
    if config is not None:
        from ascent.configfile import load_config

        cfg = load_config(config, sets or [])
        if not hasattr(cfg, "clean"):
            raise AscentError(f"{config}: a classic PPO config has no [clean] section")
        data = cfg.data
        columns = data.columns if data.explicitly_set("columns") else None
        return CleanSettings(cfg.clean, cfg.reward, cfg.sandbox, columns, data.split)
    from ascent.configfile.loader import sections_from_sets

    applies = "without --config only [clean], [reward] and [sandbox] apply"
    sections = sections_from_sets(_Sections, sets or [], applies)
    return CleanSettings(sections.clean, sections.reward, sections.sandbox)


@dataclass
class CleanReport:
    """What one cleaning run kept and dropped."""

    source: Path
    out: Path
    dropped_out: Path
    kept: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)

    @property
    def dropped(self) -> int:
        return sum(self.by_reason.values())

    def to_json(self) -> dict[str, Any]:
        reasons = {r: self.by_reason[r] for r in DROP_REASONS if self.by_reason[r]}
        return {"kept": self.kept, "dropped": self.dropped, "by_reason": reasons}


def dropped_path(out: Path) -> Path:
    """OUT with `.dropped.jsonl` in place of `.jsonl`."""
    if not out.name.endswith(".jsonl") or out.name == ".jsonl":
        raise AscentError(f"--out {out}: the output is JSONL; give a file name ending in .jsonl")
    return out.with_name(out.name.removesuffix(".jsonl") + ".dropped.jsonl")


def clean_file(
    source: str,
    out: Path,
    settings: CleanSettings,
    kind: str = "auto",
    console: Console | None = None,
) -> CleanReport:
    """Clean the rows of `source` into `out` and its `.dropped.jsonl` sibling."""
    from ascent.data.bundled import resolve_data_path
    from ascent.data.clean import FilterContext, ReferenceJudge, apply_filters, make_item
    from ascent.data.code_problems import check_row_kind
    from ascent.observe.progress import TrainProgress

    check_row_kind(kind)
    path = resolve_data_path(source)
    report = CleanReport(path, out, dropped_path(out))
    rows, total = numbered_rows(path, settings.split)
    for target in (report.out, report.dropped_out):
        if target.resolve() == path.resolve():
            raise AscentError(f"--out {out}: {target} is the input; write the output elsewhere")
    judge = ReferenceJudge(settings.reward.code, settings.sandbox)
    ctx = FilterContext(settings.clean, settings.reward.math.timeout_s, judge)
    fields = {"kept": "kept", "dropped": "dropped"}
    console = console or Console(stderr=True)
    progress = TrainProgress(total, fields, description="clean", console=console)
    try:
        with JsonlOutput(report.out) as kept, JsonlOutput(report.dropped_out) as dropped, progress:
            for chunk in _chunks(rows, CHUNK):
                items = [
                    make_item(
                        n,
                        row,
                        kind=kind,
                        columns=settings.columns,
                        where=f"{path}:{n}",
                        default_language=settings.reward.code.default_language,
                    )
                    for n, row in chunk
                ]
                drops = apply_filters(items, ctx)
                for i, item in enumerate(items):
                    report.kinds[item.kind] += 1
                    if i in drops:
                        reason, detail = drops[i]
                        report.by_reason[reason] += 1
                        dropped.write({**item.row, "drop_reason": reason, "drop_detail": detail})
                    else:
                        report.kept += 1
                        kept.write(item.cleaned_row())
                done = report.kept + report.dropped
                progress.update(done, {"kept": report.kept, "dropped": report.dropped})
    finally:
        judge.close()
    return report


def numbered_rows(path: Path, split: str) -> tuple[Iterable[tuple[int, dict[str, Any]]], int]:
    """The rows of `path` and how many there are (JSONL is counted, then streamed)."""
    from ascent.data.files import detect_format, read_rows

    if not path.exists():
        raise AscentError(f"{path}: no such file or directory")
    try:
        fmt = detect_format(path, "auto")
    except AscentError:
        raise AscentError(
            f"{path}: cannot tell the format from the name; use .jsonl, .jsonl.gz, .parquet or "
            "a datasets.save_to_disk directory"
        ) from None
    if fmt == "jsonl":
        total = sum(1 for _ in read_rows(path, fmt, split))
        rows: Iterable[tuple[int, dict[str, Any]]] = read_rows(path, fmt, split)
    else:
        rows = list(read_rows(path, fmt, split))
        total = len(rows)
    if not total:
        raise AscentError(f"{path}: no rows in it")
    return rows, total


def _chunks(rows: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class JsonlOutput:
    """A JSONL file written beside its final name and moved into place only on success."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.partial = path.with_name(path.name + ".partial")

    def __enter__(self) -> JsonlOutput:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.partial.open("w", encoding="utf-8")
        except OSError as err:
            raise AscentError(f"{self.path}: cannot write it ({err.strerror})") from None
        return self

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps(row, ensure_ascii=False, default=_json_value) + "\n")

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        self._fh.close()
        if kind is None:
            os.replace(self.partial, self.path)
        else:
            self.partial.unlink(missing_ok=True)


def _json_value(value: Any) -> Any:
    """Values Parquet and datasets rows hold that JSON does not: arrays, dates, bytes."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def print_report(report: CleanReport, console: Console | None = None) -> None:
    """The reasons table and the output paths; then the JSON summary as the last line."""
    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and pipes: wide enough that rows do not wrap
            console = Console(width=120)
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(report.kinds.items()))
    total = report.kept + report.dropped
    console.print(f"{report.source}: {total} rows ({kinds})", highlight=False, soft_wrap=True)
    table = Table(title="data clean", title_justify="left")
    table.add_column("outcome")
    table.add_column("rows", justify="right")
    table.add_column("share", justify="right")
    for reason in DROP_REASONS:
        if report.by_reason[reason]:
            count = report.by_reason[reason]
            table.add_row(f"dropped: {reason}", str(count), f"{100 * count / total:.1f}%")
    table.add_row("kept", str(report.kept), f"{100 * report.kept / total:.1f}%", style="bold")
    console.print(table)
    console.print(f"kept:    {report.out}", highlight=False, soft_wrap=True)
    console.print(f"dropped: {report.dropped_out}", highlight=False, soft_wrap=True)
    typer.echo(json.dumps(report.to_json()))


@data_app.command("clean")
def clean(
    input: Annotated[
        str,
        typer.Argument(
            metavar="IN",
            help="Problems: .jsonl / .jsonl.gz, .parquet, a datasets.save_to_disk directory, or "
            "a bundled set (ascent:gsm8k_test).",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            metavar="OUT",
            help="Kept rows (.jsonl); dropped ones go to OUT with .dropped.jsonl.",
        ),
    ],
    kind: Annotated[
        str,
        typer.Option(
            "--kind",
            help="math, code, or auto: each row by its columns (statement, HumanEval or "
            "code_contests fields: code; otherwise math).",
        ),
    ] = "auto",
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="TOML config: its [clean], [data.columns], [reward], [sandbox]."
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a config value, e.g. --set clean.reasons='[\"proof\"]'."
        ),
    ] = None,
) -> None:
    """Clean problems for RL (SRPO): strip links, drop multi-part, proof, figure, table, file,
    network and environment problems, unparsable answers and failing reference solutions."""
    settings = load_settings(config, set_)
    print_report(clean_file(input, out, settings, kind))
