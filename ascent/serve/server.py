"""`ascent serve`: a local policy behind an OpenAI-compatible HTTP endpoint.

    POST /v1/chat/completions   POST /v1/completions   GET /v1/models   (also without /v1)

The server needs one thing from the model, a `Generator` (ascent.serve.batching): a batch of
prompts in, one `Generation` per prompt out. Concurrent requests with the same sampling
settings are gathered by `Batcher` into ONE generate call (up to `max_batch` prompts), which
is what makes a local model usable by agentic roles with many episodes in flight.
Streaming (`"stream": true`) is answered as server-sent events carrying the whole completion
in one chunk, so streaming clients work; tokens are not streamed one by one. The HTTP side
(framing, body limits, time-outs, clients that hang up) is `ascent.serve.handler`; checking
--host and --port before the model loads is `ascent.serve.address`.

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
import logging
import signal
import sys
import threading
import time
from typing import Any

from ascent.api.failures import KeyMissingError
from ascent.api.keys import KeySource, Secret
from ascent.errors import AscentError
from ascent.secrets import ENV_NAME, looks_like_key, mask_secret
from ascent.serve.address import bind_error, check_listen, listen_address
from ascent.serve.batching import Batcher, Generation, Generator, GenParams
from ascent.serve.handler import SOCKET_TIMEOUT_SEC, HTTPServer
from ascent.serve.wire import (
    RequestError,
    chat_messages,
    check_model,
    check_supported,
    choices_param,
    completion_prompt,
    completion_response,
    sampling_params,
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


class PolicyServer:
    """The HTTP server; `with PolicyServer(gen, port=0) as srv:` runs it in a thread.

    A host or port it cannot listen on is an `AscentError` saying what to change."""

    def __init__(
        self,
        generator: Generator,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        max_batch: int = DEFAULT_MAX_BATCH,
        window_sec: float = BATCH_WINDOW_SEC,
        api_key: Secret | None = None,
        socket_timeout_sec: float = SOCKET_TIMEOUT_SEC,
    ) -> None:
        self.generator = generator
        # None: every request is served; else only those with `Authorization: Bearer <key>`.
        self._key = None if api_key is None else api_key.reveal().encode()
        self.started = int(time.time())
        family, address = listen_address(host, port)
        try:
            self.httpd = HTTPServer((address, port), self, family, socket_timeout_sec)
        except OSError as err:
            raise bind_error(err, host, port) from None
        self.host, self.port = self.httpd.server_address[:2]
        self.batcher = Batcher(generator, max_batch=max_batch, window_sec=window_sec)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

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
        """The completion for a request body; a request that cannot be served is refused
        (RequestError) before anything reaches the model."""
        check_model(body, self.generator.name)
        check_supported(body)
        if chat:
            prompt = self.generator.chat_prompt(chat_messages(body))
        else:
            prompt = completion_prompt(body)
        tokens = self.generator.count_tokens(prompt)
        if tokens == 0:  # e.g. messages whose contents are all empty, for a model without template
            field = "messages" if chat else "prompt"
            raise RequestError(
                400, f"'{field}' gives an empty prompt (0 tokens); send some text", param=field
            )
        n = choices_param(body)
        params = sampling_params(body, tokens, self.generator.max_context)
        futures = [self.batcher.submit(prompt, params) for _ in range(n)]
        outs: list[Generation] = [f.result() for f in futures]
        return completion_response(self.generator.name, outs, chat)


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

    if max_batch < 1:
        raise AscentError(
            f"--max-batch {max_batch}: must be at least 1 (prompts per generate call)"
        )
    check_listen(host, port)  # a bad --host or --port fails here, not after the model loads
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
