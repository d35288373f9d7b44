"""Batching for `ascent serve`: what the server needs from a model, and the gathering of
concurrent requests into one generate call.

The model side is a `Generator`: a batch of prompts in, one `Generation` per prompt out.
`Batcher` runs it on one worker thread; requests that arrive together and share sampling
settings (`GenParams`) go into the same call, up to `max_batch` prompts.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from ascent.runtime import caller_threads

log = logging.getLogger("ascent.serve.server")


@dataclass(frozen=True)
class GenParams:
    """Sampling settings; requests with equal settings share a generate call."""

    max_tokens: int
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class Generation:
    text: str
    finish_reason: str  # "stop" (EOS or a stop string) or "length"
    prompt_tokens: int
    completion_tokens: int


class Generator(Protocol):
    """What `ascent serve` needs from a model."""

    name: str  # the model name clients send and /v1/models lists
    max_context: int | None  # prompt + completion tokens the model accepts (None: no limit)

    def count_tokens(self, text: str) -> int: ...

    def chat_prompt(self, messages: Sequence[dict[str, Any]]) -> str:
        """The prompt text for a chat (the tokenizer's chat template, or plain contents)."""
        ...

    def generate(self, prompts: Sequence[str], params: GenParams) -> list[Generation]:
        """One completion per prompt, all with `params` (stop strings already applied)."""
        ...


@dataclass
class _Pending:
    prompt: str
    params: GenParams
    future: Future = field(default_factory=Future)


class Batcher:
    """Gathers requests arriving together into one `generate` call per sampling setting.

    A single worker thread takes the first waiting request, then everything that arrives
    within `window_sec` (or while the previous batch was generating), up to `max_batch`.
    """

    def __init__(self, generator: Generator, max_batch: int = 32, window_sec: float = 0.01):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.generator = generator
        self.max_batch = max_batch
        self.window_sec = window_sec
        self.batch_sizes: list[int] = []  # one entry per generate call (tests, stats)
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._threads = caller_threads()  # the model runs on the batcher's thread
        self._thread = threading.Thread(target=self._run, name="ascent-batcher", daemon=True)
        self._thread.start()

    def submit(self, prompt: str, params: GenParams) -> Future:
        pending = _Pending(prompt, params)
        self._queue.put(pending)
        return pending.future

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _take(self) -> list[_Pending] | None:
        first = self._queue.get()
        if first is None:
            return None
        batch = [first]
        deadline = time.monotonic() + self.window_sec
        while len(batch) < self.max_batch:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is None:
                self._queue.put(None)  # stop after this batch
                break
            batch.append(item)
        return batch

    def _run(self) -> None:
        self._threads()
        while (batch := self._take()) is not None:
            groups: dict[GenParams, list[_Pending]] = {}
            for item in batch:
                groups.setdefault(item.params, []).append(item)
            for params, items in groups.items():
                self.batch_sizes.append(len(items))
                try:
                    outs = self.generator.generate([i.prompt for i in items], params)
                except Exception as exc:  # the request threads report it as a 500
                    log.exception("generate failed")
                    for item in items:
                        item.future.set_exception(exc)
                    continue
                for item, out in zip(items, outs, strict=True):
                    item.future.set_result(out)
