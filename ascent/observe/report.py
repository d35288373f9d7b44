"""`ascent report RUN_DIR`: what a finished (or running) run did, at a glance.

Reads only the run directory (summary.json, metrics.jsonl), so it works on a run copied from
another machine, while it is still training, or after it was killed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ascent.errors import AscentError
from ascent.observe.diagnosis import Finding, diagnose
from ascent.observe.live import read_events

SPARK = "▁▂▃▄▅▆▇█"
HEADLINE = (
    "reward",
    "eval/accuracy",
    "kl",
    "completions/mean_length",
    "adv_std",
    "frac_reward_zero_std",
    "entropy",
    "clip_ratio",
    "loss",
    "grad_norm",
    "reward/immediate",
    "reward/delayed",
    "episode/return_mean",
    "tokens_per_s",
)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise AscentError(f"{run_dir}: no metrics.jsonl here; is this a run directory?")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise AscentError(
            f"{path}: not text (byte {err.start} is not UTF-8); ascent writes one JSON object per "
            "line, so this file is damaged or not ascent's: move it away and report again"
        ) from None
    rows = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError, ValueError):
            continue  # a line cut short by a kill
        if isinstance(row, dict):
            rows.append(row)
    return rows


def sparkline(values: list[float], width: int = 24) -> str:
    """A unicode sparkline of `values`, downsampled to `width` buckets by averaging."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return ""
    buckets = min(width, len(values))
    means = []
    for b in range(buckets):
        chunk = values[b * len(values) // buckets : (b + 1) * len(values) // buckets]
        means.append(sum(chunk) / len(chunk))
    lo, hi = min(means), max(means)
    if hi == lo:
        return SPARK[0] * len(means)
    return "".join(SPARK[int((m - lo) / (hi - lo) * (len(SPARK) - 1))] for m in means)


def _series(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [
        float(r[key])
        for r in rows
        if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
    ]


def read_run(run_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A run directory's metrics and its summary ({} while the run has not ended)."""
    if not run_dir.is_dir():
        raise AscentError(f"{run_dir}: no such run directory; check the path")
    return read_metrics(run_dir), read_summary(run_dir)


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's summary.json ({} while the run has not ended); a damaged one is one line."""
    path = run_dir / "summary.json"
    if not path.is_file():
        return {}
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, ValueError) as err:
        why = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise AscentError(
            f"{path}: not a JSON summary ({why}); ascent writes it whole at the end of a run, so "
            "it is damaged or not ascent's: move it away to report on the metrics alone"
        ) from None
    if not isinstance(summary, dict):
        raise AscentError(f"{path}: not a JSON object; move it away to report on the metrics")
    return summary


def build_report(run_dir: Path) -> tuple[list[list[str]], dict[str, Any], list[Finding]]:
    """Rows of (metric, first, last, min, max, trend), the summary, and the findings."""
    rows, summary = read_run(Path(run_dir))
    table = []
    for key in HEADLINE:
        series = _series(rows, key)
        if not series:
            continue
        table.append(
            [
                key,
                f"{series[0]:.4g}",
                f"{series[-1]:.4g}",
                f"{min(series):.4g}",
                f"{max(series):.4g}",
                sparkline(series),
            ]
        )
    return table, summary, diagnose(rows)


def print_report(run_dir: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table, summary, findings = build_report(run_dir)
    console = Console()
    out = Table(title=f"run {run_dir}")
    for col in ("metric", "first", "last", "min", "max", "trend"):
        out.add_column(col, justify="left" if col in ("metric", "trend") else "right")
    for row in table:
        out.add_row(*row)
    console.print(out)
    for key in sorted(summary):
        if key != "paths" and not isinstance(summary[key], (dict, list)):
            console.print(f"{key}: {summary[key]}", markup=False, highlight=False)
    events = read_events(run_dir)
    if events:
        console.print("[bold yellow]during training[/]")
        for event in events:
            what = event.get("message", "") + (f" -> {event['fix']}" if "fix" in event else "")
            line = f"  step {event.get('step')}: {event.get('pattern')} {event.get('event')}"
            console.print(f"{line}{': ' + what if what else ''}", markup=False, highlight=False)
    if not findings:
        console.print("diagnosis: no known failure pattern in the metrics")
        return
    console.print("[bold yellow]diagnosis[/]")
    for finding in findings:
        console.print(f"  {finding}", markup=False, highlight=False)
