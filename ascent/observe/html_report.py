"""`ascent report RUN_DIR --html [FILE]`: one self-contained HTML page of a run's curves.

Every plot is a PNG drawn by matplotlib (`plots.py`) and embedded as base64, and the style is
inline, so the page needs no network and no other file: it can be mailed, attached to an
issue or opened from a copied run directory. Like the text report it reads only the run
directory: metrics.jsonl, summary.json (the eval accuracy before and after RL) and, when live
diagnosis wrote it, events.jsonl (`{"step", "pattern", "event", "message", "fix"}` per line).
Patterns that `diagnose()` finds in the metrics afterwards are marked too, unless the same
pattern already fired live.

`--compare RUN_A RUN_B ...` draws several runs on the same plots, one colour per run.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascent.errors import AscentError
from ascent.observe.diagnosis import Finding, diagnose
from ascent.observe.live import read_events
from ascent.observe.plots import Marker, RunCurves, draw, panels_with_data, place_markers, png
from ascent.observe.report import read_run
from ascent.rundir import write_text_atomic

INSTALL_HINT = "pip install 'ascent[report]'"
FIRST_SUMMARY_KEYS = ("eval_accuracy_before", "eval_accuracy_after", "steps", "wall_s")
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1340px;
       padding: 0 1rem; color: #222; }
h1 { font-size: 1.4rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: left;
         vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr));
         gap: 1rem; }
figure { margin: 0; } figcaption { font-size: 0.8rem; color: #555; }
img { max-width: 100%; height: auto; }
"""


def require_matplotlib() -> None:
    """Refuse `--html` in one line when the `report` extra is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise AscentError(f"--html needs matplotlib, not installed: {INSTALL_HINT}") from None


def split_paths(paths: Sequence[Path]) -> tuple[list[Path], Path | None]:
    """The run directories and the output FILE among `ascent report --html`'s arguments: the
    FILE is the one path that ends in .html (or .htm) and is not a directory."""
    outputs = [p for p in paths if p.suffix.lower() in (".html", ".htm") and not p.is_dir()]
    if len(outputs) > 1:
        raise AscentError(f"two output files given ({outputs[0]}, {outputs[1]}); pass one")
    run_dirs = [p for p in paths if p not in outputs]
    if not run_dirs:
        raise AscentError("no run directory given: ascent report RUN_DIR --html [FILE]")
    return run_dirs, (outputs[0] if outputs else None)


def diagnosis_events(run_dir: Path) -> list[dict[str, Any]]:
    """The events live diagnosis wrote to events.jsonl, oldest first; a line without an
    integer step and a pattern name is skipped."""
    return [
        e
        for e in read_events(run_dir)
        if isinstance(e, dict)
        and isinstance(e.get("pattern"), str)
        and isinstance(e.get("step"), int)
        and not isinstance(e.get("step"), bool)
    ]


@dataclass
class Run:
    path: Path
    curves: RunCurves
    summary: dict[str, Any]
    findings: list[Finding]  # diagnose() on the whole metric history
    events: list[dict[str, Any]]  # events.jsonl, live diagnosis


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def load_run(run_dir: Path, name: str) -> Run:
    rows, summary = read_run(run_dir)
    if not any("step" in row for row in rows):
        raise AscentError(f"{run_dir}: metrics.jsonl has no logged step yet; nothing to plot")
    findings, events = diagnose(rows), diagnosis_events(run_dir)
    fired = [e for e in events if e.get("event", "fired") != "cleared"]
    markers = [Marker(e["step"], e["pattern"], live=True) for e in fired]
    live = {e["pattern"] for e in fired}
    markers += [Marker(f.step, f.code, live=False) for f in findings if f.code not in live]
    curves = RunCurves(
        name=name,
        rows=rows,
        eval_before=_number(summary.get("eval_accuracy_before")),
        eval_after=_number(summary.get("eval_accuracy_after")),
        last_step=max(int(row.get("step", 0)) for row in rows),
        markers=markers,
    )
    return Run(run_dir, curves, summary, findings, events)


def run_names(run_dirs: Sequence[Path]) -> list[str]:
    """Legend names: each directory's name, or more of its path where two names clash."""
    for depth in (1, 2):
        names = ["/".join(p.resolve().parts[-depth:]) for p in run_dirs]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in run_dirs]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _summary_table(runs: Sequence[Run]) -> str:
    keys = {
        k
        for run in runs
        for k, v in run.summary.items()
        if k != "paths" and not isinstance(v, (dict, list))
    }
    ordered = [k for k in FIRST_SUMMARY_KEYS if k in keys] + sorted(keys - {*FIRST_SUMMARY_KEYS})
    if not ordered:
        return "<p>no summary.json yet (the run has not finished)</p>"
    head = "".join(f"<th>{html.escape(r.curves.name)}</th>" for r in runs)
    body = "".join(
        f"<tr><th>{html.escape(k)}</th>"
        + "".join(f'<td class="num">{html.escape(_fmt(r.summary.get(k)))}</td>' for r in runs)
        + "</tr>"
        for k in ordered
    )
    return f"<table><tr><th>summary.json</th>{head}</tr>{body}</table>"


def _diagnosis_table(runs: Sequence[Run]) -> str:
    lines = []
    for run in runs:
        for e in run.events:
            source = f"live ({e.get('event', 'fired')})"
            lines.append((run, e["step"], e["pattern"], source, e.get("message"), e.get("fix")))
        for f in run.findings:
            lines.append((run, f.step, f.code, "after the run", f.message, f.fix))
    if not lines:
        return "<p>no known failure pattern in the metrics</p>"
    compare = len(runs) > 1
    head = ("<th>run</th>" if compare else "") + "".join(
        f"<th>{h}</th>" for h in ("step", "pattern", "found", "what", "first fix to try")
    )
    body = []
    for run, *cells in lines:
        row = [run.curves.name] if compare else []
        row += [_fmt(c) if c is not None else "" for c in cells]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _caption(runs: Sequence[Run], panel_name: str, markers: Sequence[tuple[int, Marker]]) -> str:
    notes = []
    if panel_name == "eval-accuracy":
        for run in runs:
            who = f"{run.curves.name}: " if len(runs) > 1 else ""
            for when, value in (
                ("before", run.curves.eval_before),
                ("after", run.curves.eval_after),
            ):
                if value is not None:
                    notes.append(f"{who}{when} RL {value:.1%}")
    for i, marker in markers:
        who = f"{runs[i].curves.name}: " if len(runs) > 1 else ""
        found = "live" if marker.live else "after the run"
        notes.append(f"{who}{marker.pattern} at step {marker.step} ({found})")
    return "; ".join(notes)


def render_page(runs: Sequence[Run]) -> str:
    """The whole page: summary table, one figure per panel with data, diagnosis table."""
    curves = [run.curves for run in runs]
    panels = panels_with_data(curves)
    placed = place_markers(panels, curves)
    figures = []
    for panel in panels:
        data = base64.b64encode(png(draw(panel, curves, placed[panel.name]))).decode("ascii")
        caption = _caption(runs, panel.name, placed[panel.name])
        alt = html.escape(f"{panel.title}. {caption}".strip(". "), quote=True)
        figures.append(
            f'<figure id="plot-{panel.name}"><img src="data:image/png;base64,{data}" '
            f'width="640" height="300" alt="{alt}">'
            + (f"<figcaption>{html.escape(caption)}</figcaption>" if caption else "")
            + "</figure>"
        )
    names = " vs ".join(run.curves.name for run in runs)
    paths = "".join(f"<li><code>{html.escape(str(run.path))}</code></li>" for run in runs)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>ascent report: {html.escape(names)}</title><style>{STYLE}</style></head>"
        f"<body><h1>ascent report: {html.escape(names)}</h1><ul>{paths}</ul>"
        f"<h2>Summary</h2>{_summary_table(runs)}"
        f'<h2>Curves</h2><div class="plots">{"".join(figures)}</div>'
        "<p>Long curves show a moving average over the faint raw values. Dashed vertical lines:"
        " a pattern live diagnosis fired during training; dotted: one found afterwards.</p>"
        f"<h2>Diagnosis</h2>{_diagnosis_table(runs)}</body></html>\n"
    )


def write_html_report(run_dirs: Sequence[Path], out: Path | None = None) -> Path:
    """Write the page for `run_dirs` (several: overlaid) to `out`; return its path. The default
    is RUN_DIR/report.html, or the first RUN_DIR's compare.html for several runs."""
    require_matplotlib()
    run_dirs = [Path(p) for p in run_dirs]
    runs = [load_run(p, name) for p, name in zip(run_dirs, run_names(run_dirs), strict=True)]
    if out is None:
        out = run_dirs[0] / ("report.html" if len(run_dirs) == 1 else "compare.html")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, render_page(runs))
    return out
