"""Token usage per role: counted by the client, printed at the end of a run, saved in the run."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

USAGE_FILE = "api_usage.json"


@dataclass
class RoleUsage:
    """What one role spent. `requests` counts answered calls; retries and failures are extra."""

    requests: int = 0
    failures: int = 0
    retries: int = 0
    fallbacks: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_sec: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class UsageLedger:
    """Thread-safe counters per role (the log assistant calls from its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._roles: dict[str, RoleUsage] = {}

    def _get(self, role: str) -> RoleUsage:
        return self._roles.setdefault(role, RoleUsage())

    def answered(
        self, role: str, prompt_tokens: int, completion_tokens: int, latency: float
    ) -> None:
        with self._lock:
            u = self._get(role)
            u.requests += 1
            u.prompt_tokens += prompt_tokens
            u.completion_tokens += completion_tokens
            u.latency_sec += latency

    def count(self, role: str, what: str) -> None:
        """Add one to `failures`, `retries` or `fallbacks`."""
        with self._lock:
            u = self._get(role)
            setattr(u, what, getattr(u, what) + 1)

    def snapshot(self) -> dict[str, RoleUsage]:
        with self._lock:
            return {k: RoleUsage(**asdict(v)) for k, v in sorted(self._roles.items())}

    def absorb(self, other: dict[str, RoleUsage]) -> None:
        """Add another ledger's `snapshot()` (another rank's roles) to this one."""
        with self._lock:
            for role, theirs in other.items():
                mine = self._get(role)
                for key, value in asdict(theirs).items():
                    setattr(mine, key, getattr(mine, key) + value)

    def summary_lines(self) -> list[str]:
        """One line per role, for the end of a run."""
        lines = []
        for role, u in self.snapshot().items():
            mean = u.latency_sec / u.requests if u.requests else 0.0
            lines.append(
                f"{role}: {u.requests} requests, {u.prompt_tokens} prompt + "
                f"{u.completion_tokens} completion tokens, {u.retries} retries, "
                f"{u.fallbacks} fallbacks, {u.failures} failures, {mean:.2f} s mean latency"
            )
        return lines

    def to_dict(self) -> dict[str, dict[str, float | int]]:
        return {
            role: {**asdict(u), "total_tokens": u.total_tokens}
            for role, u in self.snapshot().items()
        }

    def finish(self, run_dir: str | Path | None, echo: Callable[[str], None] = print) -> None:
        """End of a run: print one line per role and write `api_usage.json` (if anything ran)."""
        if not self._roles:
            return
        for line in self.summary_lines():
            echo(f"api usage: {line}")
        if run_dir is not None:
            self.write(run_dir)

    def write(self, run_dir: str | Path) -> Path:
        """Write `api_usage.json` into the run directory and return its path."""
        path = Path(run_dir) / USAGE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path
