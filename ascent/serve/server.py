"""`ascent serve`: a local policy behind an OpenAI-compatible HTTP endpoint.

    POST /v1/chat/completions   POST /v1/completions   GET /v1/models   (also without /v1)

The server needs one thing from the model, a `Generator` (ascent.serve.batching): a batch of
prompts in, one `Generation` per prompt out. Concurrent requests with the same sampling
settings are gathered by `Batcher` into ONE generate call (up to `max_batch` prompts), which
is what makes a local model usable by agentic roles with many episodes in flight.
Streaming (`"stream": true`) is answered as server-sent events carrying the whole completion
in one chunk, so streaming clients work; tokens are not streamed one by one.

With a key (`--api-key-env VAR`: the NAME of the variable holding it, read once at startup),
every route answers 401 in OpenAI's shape (`code: invalid_api_key`, so the openai client raises
`AuthenticationError`) unless the request carries `Authorization: Bearer <key>`; the token is
compared in constant time and no more than its first 4 characters are ever printed. Without a
key, binding an address other than loopback prints a warning: anyone who can reach the port
can use the model.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ascent.api.failures import KeyMissingError
from ascent.api.keys import KeySource, Secret
from ascent.errors import AscentError
from ascent.secrets import ENV_NAME, looks_like_key, mask_secret
from ascent.serve.batching import Batcher, Generation, Generator, GenParams
from ascent.serve.wire import (
    RequestError,
    check_supported,
    choices_param,
    completion_response,
    sampling_params,
    stream_events,
)

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_MAX_BATCH",
    "DEFAULT_PORT",
    "Batcher",
    "GenParams",
    "Generation",
    "Generator",
    "PolicyServer",
    "exposure_warning",
    "is_loopback",
    "read_serve_key",
    "serve_forever",
]

log = logging.getLogger("ascent.serve.server")

# `ascent serve`'s defaults; its --host / --port / --max-batch options take them from here.
DEFAULT_HOST = "127.0.0.1"  # loopback: nothing outside this machine can reach the policy
DEFAULT_PORT = 8000  # vLLM's and most OpenAI-compatible servers' port
DEFAULT_MAX_BATCH = 32  # most prompts in one generate call
BATCH_WINDOW_SEC = 0.01  # how long the first request of a batch waits for company
ROUTES = ("/chat/completions", "/completions")


class PolicyServer:
    """The HTTP server; `with PolicyServer(gen, port=0) as srv:` runs it in a thread."""

    def __init__(
        self,
        generator: Generator,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        max_batch: int = DEFAULT_MAX_BATCH,
        window_sec: float = BATCH_WINDOW_SEC,
        api_key: Secret | None = None,
    ) -> None:
        self.generator = generator
        # None: every request is served; else only those with `Authorization: Bearer <key>`.
        self._key = None if api_key is None else api_key.reveal().encode()
        self.batcher = Batcher(generator, max_batch=max_batch, window_sec=window_sec)
        self.started = int(time.time())
        self.httpd = _HTTPServer((host, port), self)
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

    def check_key(self, authorization: str | None) -> None:
        """Refuse (401) a request whose `Authorization` header does not carry the key."""
        if self._key is None:
            return
        scheme, _, token = (authorization or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise RequestError(
                401,
                "Missing API key: this server requires the header 'Authorization: Bearer <key>' "
                "(openai clients send their api_key that way)",
                code="invalid_api_key",
            )
        # The header arrived as latin-1 text: encoding it back gives the bytes the client sent.
        if not hmac.compare_digest(token.encode("latin-1"), self._key):
            raise RequestError(
                401, f"Incorrect API key provided: {mask_secret(token)}", code="invalid_api_key"
            )

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
        check_supported(body)
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
        n = choices_param(body)
        params = sampling_params(
            body, self.generator.count_tokens(prompt), self.generator.max_context
        )
        futures = [self.batcher.submit(prompt, params) for _ in range(n)]
        outs: list[Generation] = [f.result() for f in futures]
        return completion_response(self.generator.name, outs, chat)

    def _check_model(self, body: dict[str, Any]) -> None:
        model = body.get("model")
        if model != self.generator.name:
            raise RequestError(
                404,
                f"The model `{model}` does not exist; this server serves `{self.generator.name}`",
                code="model_not_found",
                param="model",
            )


class _HTTPServer(ThreadingHTTPServer):
    """The socket side; each request gets a `_Handler` that answers through `app`."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], app: PolicyServer) -> None:
        self.app = app
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    """One HTTP request: route it, hand the body to the `PolicyServer`, send the answer."""

    protocol_version = "HTTP/1.1"
    server_version = "ascent-serve"
    server: _HTTPServer

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def do_GET(self) -> None:
        if not self._authorized():
            return
        if self._route() == "/models":
            self._send(200, self.server.app.models())
        else:
            self._send(404, RequestError(404, f"no route GET {self.path}").body())

    def do_POST(self) -> None:
        route = self._route()
        if not self._authorized():
            return
        raw = self.rfile.read(self._body_length())
        if route not in ROUTES:
            self._send(404, RequestError(404, f"no route POST {self.path}").body())
            return
        chat = route == "/chat/completions"
        try:
            body = _json_object(raw)
            response = self.server.app.complete(body, chat)
        except RequestError as err:
            self._send(err.status, err.body())
        except Exception as err:
            log.exception("request failed")
            self._send(500, RequestError(500, f"generation failed: {err}").body())
        else:
            if body.get("stream"):
                self._send_stream(stream_events(response, chat))
            else:
                self._send(200, response)

    def _authorized(self) -> bool:
        """True when the request may proceed; otherwise the 401 has been sent."""
        try:
            self.server.app.check_key(self.headers.get("Authorization"))
        except RequestError as err:
            # Drop the unread body (without holding it) so the connection stays in step.
            left = self._body_length()
            while left > 0 and (chunk := self.rfile.read(min(left, 1 << 16))):
                left -= len(chunk)
            self._send(err.status, err.body(), {"WWW-Authenticate": "Bearer"})
            return False
        return True

    def _body_length(self) -> int:
        return int(self.headers.get("Content-Length") or 0)

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        return path[3:] if path.startswith("/v1/") or path == "/v1" else path

    def _send(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        self._reply(status, "application/json", json.dumps(payload).encode(), headers)

    def _send_stream(self, events: list[dict[str, Any]]) -> None:
        data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
        self._reply(200, "text/event-stream", data + b"data: [DONE]\n\n")

    def _reply(
        self, status: int, content_type: str, data: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
            self.close_connection = True


def _json_object(raw: bytes) -> dict[str, Any]:
    """The request body, which must be a JSON object."""
    try:
        body = json.loads(raw or b"{}")
    except ValueError as err:  # bad JSON, or bytes that are not UTF-8
        raise RequestError(400, f"invalid JSON body: {err}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    return body


def read_serve_key(var: str, keys: KeySource | None = None) -> Secret:
    """The key `ascent serve --api-key-env VAR` requires, read from the variable named VAR."""
    if not ENV_NAME.match(var) or looks_like_key(var):
        raise AscentError(
            f"--api-key-env takes the NAME of an environment variable holding the key, not "
            f"{mask_secret(var)}; e.g. export ASCENT_SERVE_KEY=<key> and pass "
            "--api-key-env ASCENT_SERVE_KEY"
        )
    value = (keys or KeySource()).lookup(var)
    if value is None:
        raise KeyMissingError(
            f"--api-key-env {var}: the variable {var} is not set; export {var}=<the key clients "
            "must send>"
        )
    if not value.strip():
        raise KeyMissingError(
            f"--api-key-env {var}: the variable {var} is set but empty; put the key clients "
            "must send in it"
        )
    return Secret(value.strip())


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach: 127.0.0.0/8, ::1 and localhost."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a host name, or "" (every interface)
        return False


def exposure_warning(host: str, port: int, keyed: bool) -> str | None:
    """The warning for a server others can reach without a key, or None when there is none."""
    if keyed or is_loopback(host):
        return None
    where = f"{host}:{port}" if host else f"every interface, port {port}"
    return (
        f"warning: serving on {where} without a key: anyone who can reach this port can use "
        "the model; require one with --api-key-env VAR (VAR names the variable holding it) "
        "or bind 127.0.0.1"
    )


def serve_forever(
    model_or_run_dir: str,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    name: str | None = None,
    device: str = "auto",
    max_batch: int = DEFAULT_MAX_BATCH,
    api_key_env: str | None = None,
) -> None:
    """Load the policy and serve it until Ctrl-C (what `ascent serve` runs).

    `api_key_env` names the variable holding the key every request must carry; it is read
    here, once, before the model loads.
    """
    from ascent.runtime import configure_cpu
    from ascent.serve.local_policy import LocalPolicy

    key = None if api_key_env is None else read_serve_key(api_key_env)
    configure_cpu()  # torch's default thread count collapses when requests and scoring share cores
    policy = LocalPolicy.load(model_or_run_dir, name=name, device=device)
    server = PolicyServer(policy, host=host, port=port, max_batch=max_batch, api_key=key)
    keyed = "" if key is None else f"; key required (from {api_key_env}: {key.masked})"
    print(
        f"serving {policy.name} ({policy.source}) at {server.url} on {policy.device}{keyed}; "
        "Ctrl-C stops",
        flush=True,
    )
    warning = exposure_warning(host, server.port, keyed=key is not None)
    if warning:
        print(warning, file=sys.stderr, flush=True)
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
