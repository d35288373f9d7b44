"""The log assistant: every `log_interval` steps, an API role reads the latest metrics and
answers in three sentences (is the policy improving, is the critic converging, what to change).

It never stops or slows training: `observe` only appends to a short history and, on an
interval step, hands a copy to a worker thread with its own event loop. While an analysis is
in flight the next interval is skipped rather than queued; a failure or a timeout is logged
and recorded, never raised. Answers are printed and appended to `assistant.jsonl` in the run
directory.

A trainer wires it beside the run's API roles, all counting into one `UsageLedger`:

    usage = UsageLedger()                                       # the run's token counts
    roles = ApiClient.from_config(cfg, usage=usage)             # the roles the run calls
    with assistant_session(cfg, run_dir, echo, usage) as assistant:   # None unless enabled
        for step in ...:
            metrics = train_step()
            if assistant: assistant.observe(step, metrics)
    usage.finish(run_dir)           # one line per role, analyst included; api_usage.json

Both loops do: the LLM loop (`train/llm.py`) per step, the classic PPO loop
(`train/classic.py`) per update, whose metrics carry their own names (`episode/return_mean`,
`loss/value`, ...). When training ends, an analysis in flight gets a few seconds only if the
endpoint answered the one before; a dead or hanging endpoint, or Ctrl-C, ends the run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ascent.api.client import ApiClient
from ascent.api.usage import UsageLedger
from ascent.config.api import AssistantSection

log = logging.getLogger("ascent.api.assistant")

ASSISTANT_FILE = "assistant.jsonl"
# At the end of a run, the longest wait for an analysis in flight (only when the endpoint
# answered the one before: a dead or hanging endpoint is never waited for).
FINAL_ANALYSIS_WAIT_S = 10.0
# The wording covers both loops: an LLM run logs `reward`, `value_loss` and
# `explained_variance` per step; a classic PPO run logs `episode/return_mean`, `loss/value` and
# `value/explained_variance` per update.
SYSTEM_PROMPT = (
    "You read reinforcement-learning training metrics for the engineer running the job. "
    "Answer in exactly three sentences, no lists: (1) whether the policy is improving, judged "
    "from reward (or episode return) and its trend; (2) whether the critic is converging, "
    "judged from value loss and explained variance, or that there is no critic in this run; "
    "(3) the single change to try next, with a concrete value."
)


def _fmt(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.4g}") if math.isfinite(value) else str(value)
    return value


def metrics_prompt(history: list[tuple[int, dict[str, Any]]]) -> str:
    """The user message: one JSON object per logged step, oldest first."""
    lines = [
        json.dumps({"step": step, **{k: _fmt(v) for k, v in m.items()}}) for step, m in history
    ]
    return f"Metrics of the last {len(history)} logged steps, oldest first:\n" + "\n".join(lines)


class LogAssistant:
    def __init__(
        self,
        section: AssistantSection,
        make_client: Callable[[], ApiClient],
        run_dir: str | Path | None = None,
        echo: Callable[[str], None] | None = None,
    ) -> None:
        self.section = section
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.echo = echo or (lambda text: print(text, flush=True))
        self.analyses: list[dict[str, Any]] = []  # {"step", "text"} or {"step", "error"}
        self.skipped: list[int] = []  # interval steps dropped because one was in flight
        self._history: deque[tuple[int, dict[str, Any]]] = deque(maxlen=section.history)
        self._make_client = make_client
        self._jobs: queue.Queue[tuple[int, list[tuple[int, dict[str, Any]]]] | None] = queue.Queue(
            maxsize=1
        )
        self._busy = threading.Event()
        # Once closed, an answer still on its way is dropped: printing it later would land in
        # whatever the process does next (another run, a notebook cell), out of context.
        self._closed = threading.Event()
        self._output = threading.Lock()  # close() and a last answer: one or the other first
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[str] | None = None
        self._thread = threading.Thread(target=self._work, name="ascent-assistant", daemon=True)
        self._thread.start()

    @classmethod
    def from_config(
        cls,
        cfg: Any,
        run_dir: str | Path | None = None,
        echo: Callable[[str], None] | None = None,
        *,
        usage: UsageLedger | None = None,
    ) -> LogAssistant | None:
        """The assistant of a config with `[api]`, `[models]` and `[assistant]` (an LLM or a
        classic PPO run), or None when `[assistant] enabled` is false.

        `usage`: the run's ledger, so the analyst's tokens are counted with the other roles'
        (unset: a ledger of its own, which nobody prints).
        """
        section: AssistantSection = cfg.assistant
        if not section.enabled:
            return None
        client = ApiClient.from_config(cfg)
        role = replace(
            client.roles[section.role],
            length_settings=f"[assistant] max_tokens (now {section.max_tokens}) or [assistant] "
            f"history (now {section.history} records per prompt)",
        )

        def make_client() -> ApiClient:
            # one analysis at a time: observe() skips an interval while one is in flight
            return ApiClient(
                {section.role: role},
                concurrency=1,
                keys=client.keys,
                policy=client.policy,
                usage=usage,
            )

        return cls(section, make_client, run_dir, echo)

    def observe(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record one step's metrics; on an interval step, start an analysis if none is running."""
        self._history.append((step, dict(metrics)))
        if step % self.section.log_interval:
            return
        if self._busy.is_set():
            self.skipped.append(step)
            log.info("assistant: still analysing; skipped step %d", step)
            return
        self._busy.set()
        self._jobs.put_nowait((step, list(self._history)))

    def close(self, timeout: float = 0.0) -> None:
        """Stop the worker: wait at most `timeout` seconds for an analysis in flight, then
        cancel it; nothing is printed or recorded after this returns."""
        with contextlib.suppress(queue.Full):  # full only for the instant before a job is taken
            self._jobs.put(None, timeout=1.0)
        self._thread.join(timeout)
        with self._output:
            self._closed.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed in the meantime
                loop.call_soon_threadsafe(task.cancel)

    def finish(self, wait: bool = True) -> None:
        """The end of a run: wait for an analysis in flight at most FINAL_ANALYSIS_WAIT_S
        (and [assistant] timeout_sec), and only when `wait` (training ended, not interrupted)
        and the endpoint answered the previous analysis; then stop the worker."""
        answering = bool(self.analyses) and "text" in self.analyses[-1]
        grace = min(FINAL_ANALYSIS_WAIT_S, self.section.timeout_sec) if wait and answering else 0
        if not self.wait_idle(grace) and wait:
            waited = f"gave up after {grace:g} s" if grace else "not waited for"
            self.echo(f"assistant: an analysis was still running when training ended; {waited}")
        self.close()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no analysis is in flight (for tests and the end of a run)."""
        end = time.monotonic() + timeout
        while self._busy.is_set() and time.monotonic() < end:
            time.sleep(0.01)
        return not self._busy.is_set()

    # -- worker thread ------------------------------------------------------------------------

    def _work(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        client: ApiClient | None = None
        try:
            while (job := self._jobs.get()) is not None:
                step, history = job
                try:
                    if client is None:
                        client = self._make_client()
                    self._task = loop.create_task(self._ask(client, history))
                    text = loop.run_until_complete(self._task)
                    with self._output:
                        if self._closed.is_set():
                            break
                        self._record({"step": step, "text": text})
                        self.echo(f"assistant (step {step}): {text}")
                except asyncio.CancelledError:  # close() gave up on it
                    break
                except Exception as err:  # never reaches training
                    reason = (
                        f"no answer within {self.section.timeout_sec:g} s"
                        if isinstance(err, asyncio.TimeoutError)
                        else str(err) or type(err).__name__
                    )
                    with self._output:
                        if self._closed.is_set():
                            break
                        log.warning("assistant (step %d) failed: %s", step, reason)
                        self._record({"step": step, "error": reason})
                finally:
                    self._task = None
                    self._busy.clear()
        finally:
            if client is not None:
                loop.run_until_complete(client.aclose())
            loop.close()

    async def _ask(self, client: ApiClient, history: list[tuple[int, dict[str, Any]]]) -> str:
        messages = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": metrics_prompt(history)},
        ]
        result = await asyncio.wait_for(
            client.chat(self.section.role, messages, max_tokens=self.section.max_tokens),
            timeout=self.section.timeout_sec,
        )
        return " ".join(result.text.split())

    def _record(self, entry: dict[str, Any]) -> None:
        self.analyses.append(entry)
        if self.run_dir is None:
            return
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with open(self.run_dir / ASSISTANT_FILE, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError as err:
            log.warning("assistant: could not write %s: %s", ASSISTANT_FILE, err)


@contextmanager
def assistant_session(
    cfg: Any,
    run_dir: str | Path,
    echo: Callable[[str], None],
    usage: UsageLedger,
    *,
    enabled: bool = True,
    interrupted: Callable[[], bool] = lambda: False,
) -> Iterator[LogAssistant | None]:
    """The `[assistant]` log analyst for the length of a training loop: None when disabled
    (or not `enabled` here: ranks other than 0). On leaving, `LogAssistant.finish` waits for
    an analysis in flight only when the loop ran to its end (no exception, not
    `interrupted()`: a Ctrl-C the loop turned into a stop) and the endpoint answered the
    previous analysis."""
    assistant = LogAssistant.from_config(cfg, run_dir, echo, usage=usage) if enabled else None
    ended = False
    try:
        yield assistant
        ended = not interrupted()
    finally:
        if assistant is not None:
            assistant.finish(wait=ended)
