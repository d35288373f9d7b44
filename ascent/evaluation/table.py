"""The results table `ascent eval` prints: pass@k per rating band (or difficulty label)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ascent.errors import AscentError
from ascent.evaluation.harness import EvalRun


def results_table(run: EvalRun) -> Table:
    pass_k = run.header["pass_k"]
    kind = run.header["kind"]
    title = f"{run.header['format']} · {run.header['num_samples']} sample(s) per problem"
    table = Table(title=escape(title), title_justify="left")
    table.add_column("band" if kind == "code" else "group")
    table.add_column("problems", justify="right")
    table.add_column("solved", justify="right")
    for k in pass_k:
        label = "accuracy" if kind == "math" and k == 1 else f"pass@{k}"
        table.add_column(label, justify="right")
    table.add_column("failed req.", justify="right")
    for row in run.rows:
        is_total = row["kind"] == "all"
        cells = [
            escape(row["band"]),
            str(row["problems"]),
            str(row["solved"]),
            *(_percent(row[f"pass@{k}"]) for k in pass_k),
            str(row["failed_requests"]),
        ]
        table.add_row(*cells, style="bold" if is_total else None, end_section=is_total)
    return table


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def print_summary(run: EvalRun, console: Console | None = None) -> None:
    """The table, its notes and API usage; then the results path as the last line.

    Raises `AscentError` (after printing) when every request failed, so a script sees exit 2.
    """
    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and pipes: wide enough that rows do not wrap
            console = Console(width=120)
    console.print(results_table(run))
    for note in run.notes:
        console.print(escape(f"note: {note}"), highlight=False, soft_wrap=True)
    for line in run.usage_lines:
        console.print(escape(f"usage: {line}"), highlight=False, soft_wrap=True)
    console.print(str(run.results_path), highlight=False, soft_wrap=True)
    if run.all_failed:
        first = next((r.errors[0] for r in run.results if r.errors), "no answers")
        raise AscentError(f"every request failed, nothing was evaluated: {first}")
