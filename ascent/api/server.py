"""`ascent serve`: a local policy behind an OpenAI-compatible HTTP endpoint.

    POST /v1/chat/completions   POST /v1/completions   GET /v1/models   (also without /v1)

The server needs one thing from the model, a `Generator` (see the protocol below): a batch of
prompts in, one `Generation` per prompt out. Concurrent requests with the same sampling
settings are gathered by `Batcher` into ONE generate call (up to `max_batch` prompts), which
is what makes a local model usable by agentic roles with many episodes in flight.
Streaming (`"stream": true`) is answered as server-sent events carrying the whole completion
in one chunk, so streaming clients work; tokens are not streamed one by one.
"""

from __future__ import annotations

import json
import logging
import queue
import signal
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

log = logging.getLogger("ascent.api.server")


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


class RequestError(Exception):
    """A request the server refuses, answered as an OpenAI-style error object."""

    def __init__(
        self, status: int, message: str, code: str | None = None, param: str | None = None
    ):
        super().__init__(message)
        self.status, self.code, self.param = status, code, param

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {
            "error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}
        }


_UNSUPPORTED = ("logprobs", "top_logprobs", "tools", "functions", "response_format", "echo")


class PolicyServer:
    """The HTTP server; `with PolicyServer(gen, port=0) as srv:` runs it in a thread."""

    def __init__(
        self,
        generator: Generator,
        host: str = "127.0.0.1",
        port: int = 8000,
        max_batch: int = 32,
        window_sec: float = 0.01,
    ) -> None:
        self.generator = generator
        self.batcher = Batcher(generator, max_batch=max_batch, window_sec=window_sec)
        self.started = int(time.time())
        handler = _make_handler(self)
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.host, self.port = self.httpd.server_address[:2]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.1)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.batcher.close()

    def __enter__(self) -> PolicyServer:
        self._thread = threading.Thread(target=self.serve_forever, name="ascent-serve", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- request handling (called from the HTTP threads) --------------------------------------

    def models(self) -> dict[str, Any]:
        entry = {
            "id": self.generator.name,
            "object": "model",
            "created": self.started,
            "owned_by": "ascent",
        }
        return {"object": "list", "data": [entry]}

    def complete(self, body: dict[str, Any], chat: bool) -> dict[str, Any]:
        self._check_model(body)
        for key in _UNSUPPORTED:
            if body.get(key) not in (None, False, [], 0):
                raise RequestError(400, f"'{key}' is not supported by ascent serve", param=key)
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise RequestError(400, "'messages' must be a non-empty list", param="messages")
            prompt = self.generator.chat_prompt(messages)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1:
                prompt = prompt[0]
            if not isinstance(prompt, str):
                raise RequestError(400, "'prompt' must be a string", param="prompt")
        n = _int(body, "n", 1, low=1)
        params = self._params(body, prompt)
        futures = [self.batcher.submit(prompt, params) for _ in range(n)]
        outs: list[Generation] = [f.result() for f in futures]
        return _response(self.generator.name, outs, chat)

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model != self.generator.name:
            raise RequestError(
                404,
                f"The model `{model}` does not exist; this server serves `{self.generator.name}`",
                code="model_not_found",
                param="model",
            )

    def _params(self, body: dict[str, Any], prompt: str) -> GenParams:
        prompt_tokens = self.generator.count_tokens(prompt)
        limit = self.generator.max_context
        room = None if limit is None else limit - prompt_tokens
        if room is not None and room < 1:
            raise RequestError(
                400,
                f"This model's maximum context length is {limit} tokens. However, your messages "
                f"resulted in {prompt_tokens} tokens. Please reduce the length of the messages.",
                code="context_length_exceeded",
                param="messages",
            )
        key = (
            "max_completion_tokens"
            if body.get("max_completion_tokens") is not None
            else "max_tokens"
        )
        max_tokens = _int(body, key, room if room is not None else 256, low=1)
        if room is not None and max_tokens > room:
            raise RequestError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages or "
                "completion.",
                code="context_length_exceeded",
                param=key,
            )
        temperature = _num(body, "temperature", 1.0, low=0.0, high=2.0)
        top_p = _num(body, "top_p", 1.0, low=0.0, high=1.0)
        if top_p == 0:
            raise RequestError(400, "'top_p' must be in (0, 1]", param="top_p")
        stop = body.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        if not all(isinstance(s, str) and s for s in stop):
            raise RequestError(400, "'stop' must be a string or a list of strings", param="stop")
        return GenParams(max_tokens, temperature, top_p, stop)


def _int(body: dict[str, Any], key: str, default: int, low: int) -> int:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise RequestError(400, f"'{key}' must be an integer >= {low}", param=key)
    return value


def _num(body: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise RequestError(400, f"'{key}' must be a number in [{low:g}, {high:g}]", param=key)
    return float(value)


def _response(model: str, outs: list[Generation], chat: bool) -> dict[str, Any]:
    prompt_tokens = outs[0].prompt_tokens
    completion_tokens = sum(o.completion_tokens for o in outs)
    if chat:
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": o.text},
                "finish_reason": o.finish_reason,
                "logprobs": None,
            }
            for i, o in enumerate(outs)
        ]
    else:
        choices = [
            {"index": i, "text": o.text, "finish_reason": o.finish_reason, "logprobs": None}
            for i, o in enumerate(outs)
        ]
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _stream_events(response: dict[str, Any], chat: bool) -> list[dict[str, Any]]:
    """The whole answer as SSE chunks: content in one chunk, then the finish reason."""
    obj = "chat.completion.chunk" if chat else "text_completion"
    base = {k: response[k] for k in ("id", "created", "model")} | {"object": obj}
    events = []
    for choice in response["choices"]:
        i = choice["index"]
        if chat:
            delta = {"role": "assistant", "content": choice["message"]["content"]}
            events.append(base | {"choices": [{"index": i, "delta": delta, "finish_reason": None}]})
            done = {"index": i, "delta": {}, "finish_reason": choice["finish_reason"]}
        else:
            done = {"index": i, "text": choice["text"], "finish_reason": choice["finish_reason"]}
        events.append(base | {"choices": [done]})
    events[-1] = events[-1] | {"usage": response["usage"]}
    return events


def _make_handler(server: PolicyServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "ascent-serve"

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("%s " + fmt, self.address_string(), *args)

        def _route(self) -> str:
            path = self.path.split("?", 1)[0].rstrip("/")
            return path[3:] if path.startswith("/v1/") or path == "/v1" else path

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_stream(self, events: list[dict[str, Any]]) -> None:
            data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
            data += b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self._route() == "/models":
                self._send(200, server.models())
            else:
                self._send(404, RequestError(404, f"no route GET {self.path}").body())

        def do_POST(self) -> None:
            route = self._route()
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if route not in ("/chat/completions", "/completions"):
                self._send(404, RequestError(404, f"no route POST {self.path}").body())
                return
            try:
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise RequestError(400, "the request body must be a JSON object")
                chat = route == "/chat/completions"
                response = server.complete(body, chat)
            except json.JSONDecodeError as err:
                self._send(400, RequestError(400, f"invalid JSON body: {err}").body())
            except RequestError as err:
                self._send(err.status, err.body())
            except Exception as err:
                log.exception("request failed")
                self._send(500, RequestError(500, f"generation failed: {err}").body())
            else:
                if body.get("stream"):
                    self._send_stream(_stream_events(response, chat))
                else:
                    self._send(200, response)

    return Handler


def serve_forever(
    model_or_run_dir: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str | None = None,
    device: str = "auto",
    max_batch: int = 32,
) -> None:
    """Load the policy and serve it until Ctrl-C (what `ascent serve` runs)."""
    from ascent.api.local_policy import LocalPolicy

    policy = LocalPolicy.load(model_or_run_dir, name=name, device=device)
    server = PolicyServer(policy, host=host, port=port, max_batch=max_batch)
    print(
        f"serving {policy.name} ({policy.source}) at {server.url} on {policy.device}; Ctrl-C stops",
        flush=True,
    )
    previous = signal.signal(signal.SIGTERM, _interrupt)  # `kill` stops it as cleanly as Ctrl-C
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.close()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
