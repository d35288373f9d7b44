"""One place every metric goes through: metrics.jsonl plus any configured trackers.

Lines are `{"step": N, "time": seconds since the run started, <metric>: value, ...}`; values
that are not finite are written as null (JSON has no NaN) so any JSON reader can load them.
On resume, lines for steps after the checkpoint are dropped, so replayed steps are not
counted twice, and each tracker continues its run (see ascent.observe.trackers).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping
from typing import Any

from ascent.config.run import LoggingSection
from ascent.observe.trackers import Tracker, open_tracker
from ascent.rundir import RunDir, write_text_atomic


def _clean(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    def __init__(
        self,
        run_dir: RunDir,
        cfg: LoggingSection,
        *,
        config: dict[str, Any] | None = None,
        resume_step: int | None = None,
    ) -> None:
        self._cfg = cfg
        self._t0 = time.perf_counter()
        self._time_offset = 0.0
        path = run_dir.metrics_path
        if resume_step is not None and path.exists():
            kept = [ln for ln in path.read_text().splitlines() if _step_of(ln) <= resume_step]
            if kept:
                self._time_offset = float(json.loads(kept[-1]).get("time") or 0.0)
            write_text_atomic(path, "".join(f"{ln}\n" for ln in kept))
        # Held open for the whole run (closed in close()): one append per logged step.
        self._fh = open(path, "a", encoding="utf-8") if cfg.jsonl else None  # noqa: SIM115
        self._trackers: list[Tracker] = []
        try:
            for kind in cfg.trackers:
                tracker = open_tracker(
                    kind, run_dir.path, project=cfg.project, config=config or {},
                    resume_step=resume_step,
                )  # fmt: skip
                self._trackers.append(tracker)
        except BaseException:
            self.close()  # the trackers that did start are finished, not left open
            raise
        self.last: dict[str, Any] = {}

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        clean = {k: _clean(v) for k, v in metrics.items()}
        self.last = {"step": step, **clean}
        if step % self._cfg.log_every:
            return
        record = {"step": step, "time": round(self.elapsed, 3), **clean}
        if self._fh is not None:
            self._fh.write(json.dumps(record) + "\n")
            self._fh.flush()
        numeric = {k: v for k, v in clean.items() if isinstance(v, (int, float)) and v is not None}
        for tracker in self._trackers:
            tracker.log(step, numeric)

    @property
    def elapsed(self) -> float:
        return self._time_offset + time.perf_counter() - self._t0

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        for tracker in self._trackers:
            tracker.close()
        self._trackers = []

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _step_of(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return sys.maxsize  # a line cut short by a kill: drop it
