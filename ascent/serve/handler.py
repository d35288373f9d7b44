"""The HTTP side of `ascent serve`: framing, limits, time-outs and clients that hang up.

`PolicyServer` (ascent.serve.server) decides what to answer; this module gets each request to
it and the answer back, and keeps a flaky or hostile client from costing more than its own
connection:

- the listen backlog (`LISTEN_BACKLOG`) holds a burst of clients connecting at once (agentic
  rounds open dozens); the stdlib's 5 reset connections from about 32 concurrent requests;
- a body is framed by `Content-Length` or `Transfer-Encoding: chunked` and capped at
  `MAX_BODY_BYTES`. A length that is missing on a POST (411), malformed (400) or too large
  (413) is answered at once in OpenAI's error shape, then the connection closes, since where
  the next request would start is unknown;
- every socket read or write times out after `SOCKET_TIMEOUT_SEC` (waiting for the model does
  not count), so a client that sends half a request holds its thread that long, not forever;
  one whose body stops arriving gets a 408;
- a client that hangs up (a reset, a broken pipe, a time-out) costs one debug line, never a
  traceback.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import socketserver
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from ascent.serve.wire import RequestError, json_object, stream_events

log = logging.getLogger("ascent.serve.server")

LISTEN_BACKLOG = 1024  # connections queued before accept; the kernel caps it (net.core.somaxconn)
MAX_BODY_BYTES = 4 * 1024 * 1024  # 4 MiB: a million characters, far beyond any model's context
SOCKET_TIMEOUT_SEC = 30.0  # longest wait for one socket read or write
LINGER_SEC = 2.0  # how long a refused, unread body is read and dropped before the close
MAX_LINE = 4096  # longest chunk-size or trailer line of a chunked body
MAX_TRAILERS = 64  # most trailer lines after a chunked body's last chunk
ROUTES = ("/chat/completions", "/completions")
# What a client hanging up (or going silent past the time-out) raises on its connection.
HANG_UPS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError)

_DIGITS = re.compile(r"[0-9]{1,18}")
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")

Reply = tuple[int, str, bytes]  # status, content type, body


class App(Protocol):
    """What the handler asks of `PolicyServer`."""

    def check_key(self, authorization: str | None) -> None: ...

    def models(self) -> dict[str, Any]: ...

    def complete(self, body: dict[str, Any], chat: bool) -> dict[str, Any]: ...


class FramingError(RequestError):
    """A request whose body cannot be read: it is answered, then its connection closes, since
    where the next request would start is unknown."""


class HTTPServer(ThreadingHTTPServer):
    """The listening socket; each connection gets a thread running `Handler`."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(
        self,
        address: tuple[str, int],
        app: App,
        family: socket.AddressFamily = socket.AF_INET,
        socket_timeout: float = SOCKET_TIMEOUT_SEC,
    ) -> None:
        self.app = app
        self.address_family = family
        self.socket_timeout = socket_timeout
        super().__init__(address, Handler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse lookup of the address (`socket.getfqdn`), which
        stalls startup for as long as an unreachable resolver takes to give up."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up costs one debug line; anything else is a bug, logged with its
        traceback (socketserver would print it to stderr)."""
        err = sys.exc_info()[1]
        if isinstance(err, HANG_UPS):
            log.debug("%s: the client hung up (%s)", client_address[0], type(err).__name__)
        else:
            log.error("connection from %s failed", client_address[0], exc_info=True)


class Handler(BaseHTTPRequestHandler):
    """One connection's requests: read the body, hand it to the app, send the answer."""

    protocol_version = "HTTP/1.1"
    server_version = "ascent-serve"
    server: HTTPServer

    def setup(self) -> None:
        self.timeout = self.server.socket_timeout  # applied to the socket by super().setup()
        super().setup()

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("%s " + fmt, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def _serve(self, method: str) -> None:
        """Answer one request; every refusal is an OpenAI-style error object."""
        headers: dict[str, str] = {}
        try:
            reply = self._answer(method, self._receive(method))
        except FramingError as err:
            self._send(_json(err.status, err.body()), {"Connection": "close"})
            self._linger()
            return
        except RequestError as err:
            reply = _json(err.status, err.body())
            if err.status == 401:
                headers["WWW-Authenticate"] = "Bearer"
        except HANG_UPS:
            raise  # the server's handle_error logs it in one line
        except Exception as err:
            log.exception("request failed")
            reply = _json(500, RequestError(500, f"generation failed: {err}").body())
        self._send(reply, headers)

    def _receive(self, method: str) -> bytes:
        """The body, once the key is checked. A refused key's body is read and dropped, not
        held, so the connection stays usable."""
        try:
            self.server.app.check_key(self.headers.get("Authorization"))
        except RequestError:
            for _ in self._body_chunks(method):
                pass
            raise
        return b"".join(self._body_chunks(method))

    def _answer(self, method: str, raw: bytes) -> Reply:
        route = self._route()
        if method == "GET" and route == "/models":
            return _json(200, self.server.app.models())
        if method == "POST" and route in ROUTES:
            body = json_object(raw)
            chat = route == "/chat/completions"
            response = self.server.app.complete(body, chat)
            if body.get("stream"):
                return _sse(stream_events(response, chat))
            return _json(200, response)
        raise RequestError(404, f"no route {method} {self.path}")

    def _route(self) -> str:
        path = self.path.split("?", 1)[0].rstrip("/")
        return path[3:] if path.startswith("/v1/") or path == "/v1" else path

    # -- the body ------------------------------------------------------------------------------

    def _body_chunks(self, method: str) -> Iterator[bytes]:
        """The body in pieces, framed by Content-Length or chunked coding (RFC 9112 section 6);
        a GET without either has none."""
        coding = self.headers.get("Transfer-Encoding")
        lengths = self.headers.get_all("Content-Length") or []
        if coding is not None:
            if lengths:
                raise FramingError(
                    400, "send either Content-Length or Transfer-Encoding: chunked, not both"
                )
            if coding.strip().lower() != "chunked":
                raise FramingError(
                    400,
                    f"Transfer-Encoding {coding!r} is not supported; send Content-Length or "
                    "Transfer-Encoding: chunked",
                )
            yield from self._chunked()
            return
        if not lengths:
            if method == "POST":
                raise FramingError(
                    411,
                    "a POST needs a Content-Length header (the body's size in bytes) or "
                    "Transfer-Encoding: chunked",
                )
            return
        left = content_length(lengths)
        if left > MAX_BODY_BYTES:
            raise FramingError(413, too_large(f"{left:,} bytes"))
        while left:
            piece = self._read(min(left, 1 << 16))
            left -= len(piece)
            yield piece

    def _chunked(self) -> Iterator[bytes]:
        """A chunked body: hex size lines each followed by that many bytes and CRLF, a last
        chunk of size 0, then trailer lines up to a blank one (dropped)."""
        total = 0
        while size := self._chunk_size():
            total += size
            if total > MAX_BODY_BYTES:
                raise FramingError(413, too_large("a chunked body over that"))
            yield self._read(size)
            if self._line() != b"":
                raise FramingError(400, "a chunk's data must end with CRLF, as its size says")
        for _ in range(MAX_TRAILERS):
            if self._line() == b"":
                return
        raise FramingError(400, f"more than {MAX_TRAILERS} trailer lines after a chunked body")

    def _chunk_size(self) -> int:
        text = self._line().split(b";", 1)[0].strip()  # a size may carry ";name=value" extensions
        if not _HEX.fullmatch(text):
            shown = text[:40].decode("latin-1")
            raise FramingError(400, f"bad chunk size {shown!r} in a chunked body: expected hex")
        return int(text, 16)

    def _line(self) -> bytes:
        """One line of a chunked body, without its CRLF."""
        line = self._timed(self.rfile.readline, MAX_LINE + 1)
        if not line.endswith(b"\n"):
            if len(line) > MAX_LINE:
                raise FramingError(400, f"a chunked body's line is over {MAX_LINE} bytes")
            raise ConnectionAbortedError("the client closed the connection mid-body")
        return line.rstrip(b"\r\n")

    def _read(self, size: int) -> bytes:
        data = self._timed(self.rfile.read, size)
        if len(data) < size:
            raise ConnectionAbortedError("the client closed the connection mid-body")
        return data

    def _timed(self, read: Any, size: int) -> bytes:
        """`read(size)`, turning a body that stopped arriving into a 408."""
        try:
            return read(size)
        except TimeoutError:
            raise FramingError(
                408,
                f"the request body stopped arriving for {self.server.socket_timeout:g} s; send "
                "it without pauses",
            ) from None

    # -- the answer ----------------------------------------------------------------------------

    def _send(self, reply: Reply, headers: dict[str, str]) -> None:
        status, content_type, data = reply
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _linger(self) -> None:
        """Read and drop what the client is still sending, for at most LINGER_SEC, before the
        connection closes: closing with unread data resets it, and a client still sending its
        body would lose the answer before reading it."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER_SEC
            while (left := deadline - time.monotonic()) > 0:
                self.connection.settimeout(left)
                if not self.connection.recv(1 << 16):
                    break
        except OSError:  # the client is gone, or kept sending past the deadline
            pass


def content_length(values: list[str]) -> int:
    """The body's size from its Content-Length header(s): one non-negative integer."""
    texts = {v.strip() for v in values}
    text = texts.pop() if len(texts) == 1 else ""
    if not _DIGITS.fullmatch(text):
        shown = ", ".join(repr(v) for v in values)
        raise FramingError(
            400,
            f"Content-Length must be one non-negative integer (the body's size in bytes), "
            f"not {shown}",
        )
    return int(text)


def too_large(size: str) -> str:
    limit = MAX_BODY_BYTES
    return (
        f"the request body is {size}; ascent serve accepts at most {limit // (1 << 20)} MiB "
        f"({limit:,} bytes); send a shorter prompt"
    )


def _json(status: int, payload: dict[str, Any]) -> Reply:
    return status, "application/json", json.dumps(payload).encode()


def _sse(events: list[dict[str, Any]]) -> Reply:
    data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events)
    return 200, "text/event-stream", data + b"data: [DONE]\n\n"
