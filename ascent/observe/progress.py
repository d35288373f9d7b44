"""The live progress line of a training run.

In a terminal it is a rich progress bar: step / total, the chosen metrics, elapsed and ETA.
When output is not a terminal (CI, `| tee`), it prints a plain line about every 5% instead,
so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-3):
            return f"{value:.2e}"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


class TrainProgress:
    """Progress of `total` steps showing `fields` ({metric key: short label})."""

    def __init__(
        self,
        total: int,
        fields: Mapping[str, str],
        *,
        enabled: bool = True,
        description: str = "train",
        start: int = 0,
        console: Console | None = None,
        quiet: bool = False,
    ) -> None:
        self.total = total
        self.fields = dict(fields)
        self.enabled = enabled
        self.console = console or Console(stderr=False)
        self._live = enabled and self.console.is_terminal
        self._step = start
        self._start = start
        self._t0 = time.perf_counter()
        self._next_plain = start
        self._progress: Progress | None = None
        self._task: Any = None
        self.description = description
        self.quiet = quiet  # print nothing at all (ranks other than 0 of a multi-rank run)

    def __enter__(self) -> TrainProgress:
        if self._live:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(bar_width=24),
                MofNCompleteColumn(),
                TextColumn("{task.fields[metrics]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(
                self.description, total=self.total, completed=self._start, metrics=""
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
            self._progress = None

    def render(self, metrics: Mapping[str, Any]) -> str:
        return "  ".join(
            f"{label} {_fmt(metrics[key])}"
            for key, label in self.fields.items()
            if metrics.get(key) is not None
        )

    def update(self, step: int, metrics: Mapping[str, Any]) -> None:
        self._step = step
        text = self.render(metrics)
        if self._progress is not None:
            self._progress.update(self._task, completed=step, metrics=text)
        elif self.enabled and (step >= self._next_plain or step >= self.total):
            self._next_plain = step + max(1, self.total // 20)
            elapsed = time.perf_counter() - self._t0
            done = max(1, step - self._start)
            eta = elapsed / done * (self.total - step)
            self.console.print(
                f"{self.description} {step}/{self.total}  {text}  "
                f"[{elapsed:.0f}s elapsed, eta {eta:.0f}s]",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            sys.stdout.flush()

    def print(self, line: str) -> None:
        """Print plain text above the bar (or as a plain line) without breaking it.

        The text is printed as written: often a model's answer or an error from a server, so
        `[train] clip_range` is not rich markup, and a line longer than the terminal wraps
        where the terminal wraps it (soft), not at 80 columns when output is not a terminal.
        """
        if self.quiet:
            return
        console = self._progress.console if self._progress is not None else self.console
        console.print(line, markup=False, highlight=False, soft_wrap=True)
