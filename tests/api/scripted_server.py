"""A real HTTP server on loopback whose answers a test scripts, one step per request.

    with ScriptedServer() as srv:
        srv.script("/v1/chat/completions", [Reply(429, headers={"Retry-After": "1"}), ok("hi")])
        ... point base_url at srv.url + "/v1" ...
        assert srv.count("/v1/chat/completions") == 2

A path with no script left answers its `default` (404 unless set), which may be a function of
the request (route by model name). Every request is recorded
(path, headers, body, arrival time) so a test can check retry counts and timing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list -> JSON; str/bytes -> sent as is
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (a slow endpoint)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float


NOT_FOUND = Reply(404, {"error": {"message": "Not Found"}})


def chat_body(
    text: str = "ok",
    model: str = "m",
    prompt_tokens: int = 7,
    completion_tokens: int = 1,
    finish_reason: str = "stop",
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def ok(text: str = "ok", **kw: Any) -> Reply:
    return Reply(200, chat_body(text, **kw))


def models_body(*names: str) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [{"id": n, "object": "model", "created": 0, "owned_by": "x"} for n in names],
    }


class ScriptedServer:
    def __init__(self) -> None:
        self._scripts: dict[str, list[Reply]] = {}
        self._defaults: dict[str, Reply | Callable[[Seen], Reply]] = {}
        self.seen: list[Seen] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                path = self.path.split("?", 1)[0]
                with server._lock:
                    server.seen.append(
                        Seen(
                            self.command,
                            path,
                            {k.lower(): v for k, v in self.headers.items()},
                            body,
                            time.monotonic(),
                        )
                    )
                    queue = server._scripts.get(path)
                    reply = queue.pop(0) if queue else server._defaults.get(path, NOT_FOUND)
                    if callable(reply):  # a router: the reply depends on the request
                        reply = reply(server.seen[-1])
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(reply)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, reply: Reply) -> None:
                if reply.delay:
                    time.sleep(reply.delay)
                payload = reply.body
                if isinstance(payload, (dict, list)):
                    data = json.dumps(payload).encode()
                    ctype = "application/json"
                elif isinstance(payload, str):
                    data = payload.encode()
                    ctype = "application/json"
                else:
                    data = payload or b""
                    ctype = "application/json"
                try:
                    self.send_response(reply.status)
                    headers = {"Content-Type": ctype, **reply.headers}
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            do_GET = _handle
            do_POST = _handle

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that hung up (a request it cancelled) is not a test failure

        self._httpd = Quiet(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    def script(self, path: str, replies: list[Reply]) -> None:
        with self._lock:
            self._scripts[path] = list(replies)

    def default(self, path: str, reply: Reply | Callable[[Seen], Reply]) -> None:
        with self._lock:
            self._defaults[path] = reply

    def requests(self, path: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.path == path]

    def count(self, path: str) -> int:
        return len(self.requests(path))

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
