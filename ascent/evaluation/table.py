"""The tables `ascent eval` prints: pass@k per rating band (or difficulty label); in agentic
mode, pass at the first attempt and after feedback per band, and what each role produced; with
test-time RL, pass@1 without and with the updates per band."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ascent.errors import AscentError
from ascent.evaluation.agentic_results import AgenticRun, produced
from ascent.evaluation.harness import EvalRun
from ascent.evaluation.test_time_results import AdaptedRun


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


def agentic_table(run: AgenticRun) -> Table:
    """Per band: solved at the first attempt, after feedback, and fixed by the feedback."""
    h = run.header
    title = f"{h['format']} · agentic, up to {h['max_turns']} attempt(s) per problem"
    table = Table(title=escape(title), title_justify="left")
    for name in ("band", "problems", "first attempt", "after feedback", "fixed by feedback"):
        table.add_column(name, justify="left" if name == "band" else "right")
    table.add_column("attempts", justify="right")
    table.add_column("failed req.", justify="right")
    for row in run.rows:
        is_total = row["kind"] == "all"
        cells = [
            escape(row["band"]),
            str(row["problems"]),
            _count(row["solved_first_attempt"], row["pass_first_attempt"]),
            _count(row["solved"], row["pass"]),
            str(row["fixed_by_feedback"]),
            "-" if row["mean_attempts"] is None else f"{row['mean_attempts']:.1f}",
            str(row["failed_requests"]),
        ]
        table.add_row(*cells, style="bold" if is_total else None, end_section=is_total)
    return table


def roles_table(run: AgenticRun) -> Table:
    """Per role: who played it, its turns, the ones that failed or could not be read, and
    what it produced."""
    table = Table(title="roles", title_justify="left")
    table.add_column("role")
    table.add_column("played by")
    for name in ("turns 1st", "turns later", "failed req.", "unreadable"):
        table.add_column(name, justify="right")
    table.add_column("produced")
    for row in run.roles:
        by = row["source"] + (f" ({row['model']})" if "model" in row else "")
        counts = ("turns_first_attempt", "turns_after_feedback", "failed_requests", "unreadable")
        cells = [row["role"], escape(by), *(str(row[k]) for k in counts), escape(produced(row))]
        table.add_row(*cells)
    return table


def test_time_table(run: AdaptedRun) -> Table:
    """Per band: pass@1 without and with test-time RL on the same problems, the problems it
    gained and lost, the updates taken and the problems whose attempts gave no signal."""
    t = run.header["test_time_rl"]
    title = (
        f"{run.header['format']} · test-time RL per {t['scope']}: {t['steps']} update(s) x "
        f"{t['group_size']} attempts"
    )
    table = Table(title=escape(title), title_justify="left")
    names = ("band", "problems", "pass@1 without", "pass@1 with", "gained", "lost")
    for name in (*names, "updates", "no signal"):
        table.add_column(name, justify="left" if name == "band" else "right")
    for row in run.rows:
        is_total = row["kind"] == "all"
        cells = [
            escape(row["band"]),
            str(row["problems"]),
            _count(row["solved_without"], row["pass@1_without"]),
            _count(row["solved_with"], row["pass@1_with"]),
            str(row["gained"]),
            str(row["lost"]),
            f"{row['updates']}/{row['updates_tried']}",
            str(row["no_signal"]),
        ]
        table.add_row(*cells, style="bold" if is_total else None, end_section=is_total)
    return table


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _count(solved: int, rate: float | None) -> str:
    return f"{solved} ({_percent(rate)})"


def print_summary(run: EvalRun | AgenticRun | AdaptedRun, console: Console | None = None) -> None:
    """The table(s), the notes and API usage; then the results path as the last line.

    Raises `AscentError` (after printing) when every request failed, so a script sees exit 2.
    """
    if console is None:
        console = Console()
        if not console.is_terminal:  # logs and pipes: wide enough that rows do not wrap
            console = Console(width=120)
    if isinstance(run, AgenticRun):
        console.print(agentic_table(run))
        console.print(roles_table(run))
    elif isinstance(run, AdaptedRun):
        console.print(test_time_table(run))
    else:
        console.print(results_table(run))
    for note in run.notes:
        console.print(escape(f"note: {note}"), highlight=False, soft_wrap=True)
    for line in run.usage_lines:
        console.print(escape(f"usage: {line}"), highlight=False, soft_wrap=True)
    console.print(str(run.results_path), highlight=False, soft_wrap=True)
    if run.all_failed:
        raise AscentError(f"every request failed, nothing was evaluated: {run.first_error}")
