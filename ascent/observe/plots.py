"""The curves of `ascent report --html`: which panels a run has, and each one drawn with
matplotlib (its object API only: no pyplot, no global backend, safe inside another program).

A panel plots one or more metric keys of metrics.jsonl against the step. With one run, the
keys of a panel get their own colours; with several (`--compare`), each run gets a colour and
the keys of a panel a line style. Diagnosis markers (a pattern found afterwards by
`diagnose()`, or fired live into events.jsonl) are drawn as vertical lines on the panel of the
metric the pattern reads, or on the first panel when no shown panel plots it.

matplotlib is optional (`ascent[report]`): only `draw` and `png` import it.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WIDTH, HEIGHT, DPI = 6.4, 3.0, 100  # 640 x 300 px per panel
STYLES = ("-", "--", ":", "-.")
SMOOTH_FROM = 30  # series longer than this are drawn raw (faint) plus a moving average


@dataclass(frozen=True)
class Panel:
    name: str  # the figure's id in the page, e.g. "kl"
    title: str
    keys: tuple[str, ...]  # metric keys drawn (every one a run has)
    ylabel: str = ""
    percent: bool = False  # values are fractions of 1, shown as %
    patterns: tuple[str, ...] = ()  # diagnosis codes marked on this panel


PANELS: tuple[Panel, ...] = (
    Panel("reward", "reward (mean per completion)", ("reward",), patterns=("reward_at_floor",)),
    Panel("eval-accuracy", "held-out accuracy", ("eval/accuracy",), "accuracy", percent=True),
    Panel("kl", "KL to the reference policy", ("kl",), "nats", patterns=("kl_high", "kl_zero")),
    Panel(
        "length",
        "response length",
        ("completions/mean_length",),
        "tokens (mean)",
        patterns=("length_collapse",),
    ),
    Panel("adv-std", "advantage std", ("adv_std",)),
    Panel(
        "zero-std",
        "groups with zero reward variance",
        ("frac_reward_zero_std",),
        "share of groups",
        percent=True,
        patterns=("saturation",),
    ),
    Panel(
        "entropy",
        "policy entropy",
        ("entropy", "policy/entropy"),
        "nats",
        patterns=("entropy_collapse", "entropy_low"),
    ),
    Panel(
        "clip-ratio",
        "clip ratio",
        ("clip_ratio", "policy/clip_frac"),
        "share clipped",
        percent=True,
    ),
    Panel("reflection", "reflection rate", ("reflection/rate",), "share", percent=True),
    Panel(
        "agentic-reward",
        "immediate vs delayed reward",
        ("reward/immediate", "reward/delayed"),
        patterns=("reward_hacking",),
    ),
    Panel(
        "episode-return",
        "episode return",
        ("episode/return_mean", "episode/return_last20"),
        "return",
    ),
)


@dataclass(frozen=True)
class Marker:
    step: int
    pattern: str  # a diagnosis code, e.g. "kl_high"
    live: bool  # fired during training (events.jsonl) rather than found afterwards


@dataclass
class RunCurves:
    """One run as the plots need it."""

    name: str
    rows: list[dict[str, Any]]
    eval_before: float | None = None  # summary.json eval_accuracy_before
    eval_after: float | None = None
    last_step: int = 0
    markers: list[Marker] = field(default_factory=list)


def series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key`, skipping rows where it is missing, null or not finite."""
    steps, values = [], []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            steps.append(int(row.get("step", len(steps))))
            values.append(float(value))
    return steps, values


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Centred mean over `window` points (fewer at the ends, so the curve keeps its length)."""
    half = window // 2
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - half) : i + half + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def _has_eval_marks(run: RunCurves) -> bool:
    return run.eval_before is not None or run.eval_after is not None


def panels_with_data(runs: Sequence[RunCurves]) -> list[Panel]:
    """The panels at least one run has a value for (or, for accuracy, a before/after mark)."""
    shown = []
    for panel in PANELS:
        has_curve = any(series(run.rows, key)[0] for run in runs for key in panel.keys)
        if has_curve or (panel.name == "eval-accuracy" and any(map(_has_eval_marks, runs))):
            shown.append(panel)
    return shown


def place_markers(
    panels: Sequence[Panel], runs: Sequence[RunCurves]
) -> dict[str, list[tuple[int, Marker]]]:
    """{panel name: [(run index, Marker), ...]}: each marker on the panel that plots its
    pattern's metric, else on the first panel."""
    placed: dict[str, list[tuple[int, Marker]]] = {panel.name: [] for panel in panels}
    for i, run in enumerate(runs):
        for marker in run.markers:
            home = next((p for p in panels if marker.pattern in p.patterns), None)
            if home is None and panels:
                home = panels[0]
            if home is not None:
                placed[home.name].append((i, marker))
    return placed


def _colour(run_index: int, key_index: int, compare: bool) -> str:
    return f"C{run_index if compare else key_index}"


def _draw_curve(ax, steps, values, colour, style, label) -> None:
    if len(values) > SMOOTH_FROM:
        ax.plot(steps, values, color=colour, linestyle=style, linewidth=0.8, alpha=0.3)
        window = max(3, min(50, len(values) // 15))
        ax.plot(steps, moving_average(values, window), color=colour, linestyle=style, label=label)
    else:
        ax.plot(steps, values, color=colour, linestyle=style, marker="o", markersize=3, label=label)


def _draw_eval_marks(ax, runs: Sequence[RunCurves], compare: bool) -> None:
    """summary.json's held-out accuracy before RL (at step 0) and after it (last step); a
    value shared by several runs (the same starting policy) is written once."""
    written = set()
    for i, run in enumerate(runs):
        colour = _colour(i, 0, compare)
        text = {"textcoords": "offset points", "fontsize": 8, "color": colour}
        if run.eval_before is not None:
            point = (0, run.eval_before)
            ax.plot(*point, "o", markersize=8, markerfacecolor="white", markeredgecolor=colour,
                    markeredgewidth=1.5)  # fmt: skip
            if point not in written:
                ax.annotate(f"before RL {run.eval_before:.1%}", point, xytext=(7, 5), **text)
        if run.eval_after is not None:
            point = (run.last_step, run.eval_after)
            ax.plot(*point, "*", markersize=12, color=colour)
            if point not in written:
                label = f"after RL {run.eval_after:.1%}"
                ax.annotate(label, point, xytext=(-9, -12), ha="right", **text)
        written |= {(0, run.eval_before), (run.last_step, run.eval_after)}
    if any(map(_has_eval_marks, runs)):  # legend entries, in grey: the colour is the run's
        ax.plot([], [], "o", markerfacecolor="white", markeredgecolor="0.4", label="before RL")
        ax.plot([], [], "*", markersize=10, color="0.4", label="after RL")


def _draw_marker(ax, marker: Marker, colour: str) -> None:
    style = "--" if marker.live else ":"
    ax.axvline(marker.step, color=colour, linestyle=style, linewidth=1.2, alpha=0.8)
    where = ax.get_xaxis_transform()  # x in steps, y in axes fractions
    ax.text(marker.step, 0.98, f" {marker.pattern}", transform=where, rotation=90, va="top",
            ha="right", fontsize=8, color=colour)  # fmt: skip


def draw(
    panel: Panel, runs: Sequence[RunCurves], markers: Sequence[tuple[int, Marker]] = ()
) -> Figure:
    """One panel: every run's curves of `panel.keys`, the eval marks, and `markers`
    ([(run index, Marker)], see place_markers)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import PercentFormatter

    compare = len(runs) > 1
    fig = Figure(figsize=(WIDTH, HEIGHT), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    for i, run in enumerate(runs):
        keys = [k for k in panel.keys if series(run.rows, k)[0]]
        for j, key in enumerate(keys):
            label = run.name if compare else key
            if compare and len(keys) > 1:
                label = f"{run.name}: {key}"
            style = STYLES[j % len(STYLES)] if compare else "-"
            _draw_curve(ax, *series(run.rows, key), _colour(i, j, compare), style, label)
    if panel.name == "eval-accuracy":
        _draw_eval_marks(ax, runs, compare)
    for i, marker in markers:
        _draw_marker(ax, marker, f"C{i}" if compare else "tab:red")
    ax.set_title(panel.title, fontsize=11)
    ax.set_xlabel("step")
    if panel.ylabel:
        ax.set_ylabel(panel.ylabel)
    if panel.percent:
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.grid(alpha=0.3)
    ax.margins(x=0.03, y=0.12)
    if len(ax.get_legend_handles_labels()[0]) > (0 if compare else 1):
        ax.legend(fontsize=8, loc="best")
    return fig


def png(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()
