"""Diagnosis while training: the failure rules of `diagnosis.py` on a sliding window of the
latest metrics, after every logged step.

A pattern is active while its rule finds it within the last RECENT steps. When one becomes
active, one warning line with the fix is printed and an event is appended to
`RUN/events.jsonl`. It is cleared once its rule has not found it for REARM steps, and only
then can it be announced again: a pattern that flickers around its rule's threshold (a
reward hovering where a rule draws its line) is one trouble, not one per crossing.

    {"step": 412, "pattern": "kl_high", "event": "fired", "message": "...", "fix": "..."}
    {"step": 580, "pattern": "kl_high", "event": "cleared"}

`ascent report` lists them and the HTML report marks them on the curves. On resume, events
after the checkpoint's step are dropped, as metrics.jsonl's lines are.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ascent.observe.diagnosis import diagnose
from ascent.rundir import write_text_atomic

EVENTS_FILE = "events.jsonl"
WINDOW = 200  # metric rows the rules see: long enough for every rule's own window
RECENT = 10  # a finding established longer ago than this many steps is over
REARM = 50  # steps a pattern must stay unfound to count as cleared


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / EVENTS_FILE
    if not path.is_file():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
    return events


class LiveDiagnosis:
    def __init__(
        self,
        run_dir: Path,
        echo: Callable[[str], None],
        *,
        resume_step: int | None = None,
        window: int = WINDOW,
    ) -> None:
        self.path = Path(run_dir) / EVENTS_FILE
        self.echo = echo
        self.rows: deque[dict[str, Any]] = deque(maxlen=window)
        self.active: set[str] = set()
        self.unfound_since: dict[str, int] = {}  # active patterns their rules no longer find
        if resume_step is not None:
            self._reload(Path(run_dir), resume_step)

    def _reload(self, run_dir: Path, resume_step: int) -> None:
        """The rows and the active patterns as they were at the checkpoint."""
        metrics = run_dir / "metrics.jsonl"
        if metrics.is_file():
            for line in metrics.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if int(row.get("step", 0)) <= resume_step:
                    self.rows.append(row)
        if self.path.is_file():
            kept = [e for e in read_events(run_dir) if int(e.get("step", 0)) <= resume_step]
            write_text_atomic(self.path, "".join(json.dumps(e) + "\n" for e in kept))
            for event in kept:  # what was active at the checkpoint stays quiet
                if event.get("event") == "fired":
                    self.active.add(event["pattern"])
                elif event.get("event") == "cleared":
                    self.active.discard(event["pattern"])

    def observe(self, step: int, metrics: Mapping[str, Any]) -> None:
        self.rows.append({"step": step, **metrics})
        findings = {f.code: f for f in diagnose(list(self.rows)) if f.step > step - RECENT}
        for code, finding in findings.items():
            if code in self.active:
                self.unfound_since.pop(code, None)  # back: the same trouble, already announced
                continue
            self.echo(f"warning: {finding}")
            self._write(
                {"step": step, "pattern": code, "event": "fired",
                 "message": finding.message, "fix": finding.fix}
            )  # fmt: skip
            self.active.add(code)
        for code in self.active - findings.keys():
            if step - self.unfound_since.setdefault(code, step) >= REARM:
                self._write({"step": step, "pattern": code, "event": "cleared"})
                self.active.discard(code)
                del self.unfound_since[code]

    def _write(self, event: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(event) + "\n")
