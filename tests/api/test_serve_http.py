"""`ascent serve` under load and bad HTTP: a real server on loopback, raw sockets and clients.

Each test is a defect a hostile tester found: connections reset at 64 concurrent requests, a
bad Content-Length that hung, a traceback per client that hung up, a 500 or 404 for a request
missing a field.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from ascent.serve.handler import MAX_BODY_BYTES
from ascent.serve.local_policy import LocalPolicy
from ascent.serve.server import PolicyServer
from tests.api.test_serve import Echo

MODEL = "ascent:tiny"
CHAT = "/v1/chat/completions"
CHUNKED = "Transfer-Encoding: chunked\r\n"
ECHO_CHAT = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "abc"}]})


@pytest.fixture(scope="module")
def policy() -> LocalPolicy:
    return LocalPolicy.load(MODEL, device="cpu")


@pytest.fixture
def echo() -> Iterator[PolicyServer]:
    with PolicyServer(Echo(), port=0, socket_timeout_sec=1.0) as srv:
        yield srv


def connect(srv: PolicyServer, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection((srv.host, srv.port), timeout=timeout)


def post(body: bytes | str, headers: str | None = None, path: str = CHAT) -> bytes:
    """A raw POST; `headers` replaces the Content-Length line when given."""
    data = body.encode() if isinstance(body, str) else body
    framing = f"Content-Length: {len(data)}\r\n" if headers is None else headers
    return f"POST {path} HTTP/1.1\r\nHost: x\r\n{framing}\r\n".encode() + data


def answer(sock: socket.socket) -> tuple[int, http.client.HTTPResponse, dict]:
    """The next response on `sock`: status, the response (for headers) and the JSON body."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, response, json.loads(response.read())


def exchange(srv: PolicyServer, data: bytes) -> tuple[int, http.client.HTTPResponse, dict]:
    with connect(srv) as sock:
        sock.sendall(data)
        return answer(sock)


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client killed mid-request does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def error_shape(payload: dict) -> dict:
    """The error object of an OpenAI-style refusal (`{"error": {message, type, param, code}}`)."""
    assert list(payload) == ["error"]
    assert sorted(payload["error"]) == ["code", "message", "param", "type"]
    assert payload["error"]["type"] == "invalid_request_error"
    return payload["error"]


# -- load -----------------------------------------------------------------------------------


def test_64_clients_connecting_at_once_are_all_answered(policy):
    server = PolicyServer(policy, port=0, window_sec=0.05)
    # All 64 connect before the server accepts any: only the listen backlog holds them
    # (the stdlib's 5 let about 6 in; the rest time out or are reset).
    socks = [connect(server, timeout=1.0) for _ in range(64)]
    body = {"model": MODEL, "max_tokens": 4, "temperature": 0}
    for i, sock in enumerate(socks):
        messages = [{"role": "user", "content": f"{i}+1="}]
        sock.sendall(post(json.dumps(body | {"messages": messages})))
    with server:
        statuses = [answer(sock)[0] for sock in socks]
        for sock in socks:
            sock.close()

        async def gather() -> list:
            async with openai.AsyncOpenAI(base_url=server.url, api_key="x", max_retries=0) as c:
                return await asyncio.gather(
                    *(
                        c.completions.create(model=MODEL, prompt=f"{i}+2=", max_tokens=4)
                        for i in range(64)
                    )
                )

        results = asyncio.run(gather())
    assert statuses == [200] * 64
    assert len(results) == 64 and all(r.choices[0].finish_reason for r in results)
    assert sum(server.batcher.batch_sizes) == 128


# -- framing ----------------------------------------------------------------------------------


@pytest.mark.parametrize("length", ["-1", "abc", "1e3", "+5", " ", "99999999999999999999"])
def test_a_bad_content_length_is_a_400_at_once(echo, length):
    start = time.monotonic()
    status, response, payload = exchange(echo, post("{}", f"Content-Length: {length}\r\n"))
    assert time.monotonic() - start < 2  # no wait for a body that will never come
    assert status == 400 and response.getheader("Connection") == "close"
    assert "Content-Length must be one non-negative integer" in error_shape(payload)["message"]


def test_conflicting_content_lengths_are_a_400(echo):
    status, _, payload = exchange(echo, post("{}", "Content-Length: 2\r\nContent-Length: 3\r\n"))
    assert status == 400 and "'2', '3'" in error_shape(payload)["message"]


def test_a_post_without_content_length_is_a_411_naming_both_framings(echo):
    status, _, payload = exchange(echo, post(ECHO_CHAT, ""))
    message = error_shape(payload)["message"]
    assert status == 411 and "Content-Length" in message and "chunked" in message


def test_a_body_over_the_limit_is_a_413_that_says_the_limit(echo):
    status, _, payload = exchange(echo, post("", f"Content-Length: {MAX_BODY_BYTES + 1}\r\n"))
    assert status == 413
    assert "at most 4 MiB (4,194,304 bytes)" in error_shape(payload)["message"]
    # a client that sends the whole over-large body still reads the 413, not a reset
    conn = http.client.HTTPConnection(echo.host, echo.port, timeout=10)
    conn.request("POST", CHAT, body=b" " * (MAX_BODY_BYTES + 1))
    assert conn.getresponse().status == 413
    conn.close()
    assert echo.batcher.batch_sizes == []


def chunked(*pieces: bytes, tail: bytes = b"0\r\n\r\n") -> bytes:
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in pieces) + tail


def test_a_chunked_body_is_read_and_the_connection_stays_in_step(echo):
    data = ECHO_CHAT.encode()
    request = post(chunked(data[:10], data[10:]), CHUNKED)
    with connect(echo) as sock:
        sock.sendall(request)
        first = answer(sock)
        sock.sendall(post(chunked(data, tail=b"0\r\nX-Trailer: 1\r\n\r\n"), CHUNKED))
        second = answer(sock)
    for status, _, payload in (first, second):
        assert status == 200 and payload["choices"][0]["message"]["content"] == "cba"


def test_a_chunked_body_over_the_limit_or_malformed_is_refused(echo):
    half = b"x" * (MAX_BODY_BYTES // 2 + 1)
    status, _, payload = exchange(echo, post(chunked(half, half), CHUNKED))
    assert status == 413 and "at most 4 MiB" in error_shape(payload)["message"]
    status, _, payload = exchange(echo, post(b"zz\r\n{}\r\n0\r\n\r\n", CHUNKED))
    assert status == 400 and "bad chunk size 'zz'" in error_shape(payload)["message"]
    status, _, payload = exchange(echo, post("{}", "Transfer-Encoding: gzip\r\n"))
    assert (
        status == 400 and "Transfer-Encoding 'gzip' is not supported" in payload["error"]["message"]
    )


def test_half_a_request_holds_its_thread_only_until_the_socket_timeout(echo):
    with connect(echo) as sock:  # the headers arrived, the body stops half-way
        sock.sendall(post("", "Content-Length: 100\r\n") + b'{"model": ')
        start = time.monotonic()
        status, response, payload = answer(sock)
        assert status == 408 and "stopped arriving for 1 s" in payload["error"]["message"]
        assert response.getheader("Connection") == "close"
    with connect(echo) as sock:  # half the headers: the connection is closed
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        assert sock.recv(100) == b""
    assert time.monotonic() - start < 4  # 1 s each, not forever
    assert exchange(echo, post(ECHO_CHAT))[0] == 200


# -- clients that hang up ---------------------------------------------------------------------


class Gate(Echo):
    """Echo, but each generate call waits until the test lets it answer."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def generate(self, prompts, params):
        self.entered.set()
        self.release.wait(5)
        return super().generate(prompts, params)


def test_clients_that_hang_up_cost_one_log_line_each_never_a_traceback(caplog, capsys):
    caplog.set_level(logging.DEBUG, logger="ascent.serve.server")
    gate = Gate()
    with PolicyServer(gate, port=0) as srv:
        for _ in range(5):  # hung up while the model works: the answer meets a reset socket
            gate.entered.clear()
            gate.release.clear()
            sock = connect(srv)
            sock.sendall(post(ECHO_CHAT))
            assert gate.entered.wait(5)
            reset(sock)
            gate.release.set()
        for _ in range(5):  # hung up mid-body
            sock = connect(srv)
            sock.sendall(post("", "Content-Length: 1000\r\n") + b"{")
            time.sleep(0.05)
            reset(sock)
        time.sleep(0.5)  # let the handler threads finish
        assert exchange(srv, post(ECHO_CHAT))[0] == 200  # and the server still serves
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err + caplog.text
    assert all(r.exc_info is None for r in caplog.records)
    hung_up = [r for r in caplog.records if "the client hung up" in r.getMessage()]
    assert 1 <= len(hung_up) <= 10


# -- bodies that miss a field -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ("", None, "the request body is empty"),
        ("{", None, "invalid JSON body"),
        ("[" * 100_000, None, "invalid JSON body"),
        ("[1, 2]", None, "must be a JSON object, not a JSON array"),
        ('"hi"', None, "must be a JSON object, not a JSON string"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model", "parameter: 'model'"),
        ({"model": "echo"}, "messages", "Missing required parameter: 'messages'"),
        ({"model": "echo", "messages": []}, "messages", "must be a non-empty list"),
        ({"model": "echo", "messages": ["hi"]}, "messages[0]", "must be an object"),
        ({"model": "echo", "messages": [{"content": "x"}]}, "messages[0].role", "role"),
        (
            {"model": "echo", "messages": [{"role": "system", "content": "x"}, {"role": "user"}]},
            "messages[1].content",
            "Missing required parameter: 'messages[1].content'",
        ),
        (
            {"model": "echo", "messages": [{"role": "user", "content": 5}]},
            "messages[0].content",
            "must be a string or a list of text parts, not a JSON number",
        ),
        (
            {"model": "echo", "messages": [{"role": "user", "content": ""}]},
            "messages",
            "'messages' gives an empty prompt",
        ),
        (
            {"model": "echo", "messages": [{"role": "user", "content": "x"}], "stop": 5},
            "stop",
            "'stop' must be a string or a list of strings",
        ),
    ],
)
def test_a_request_missing_a_field_is_a_400_naming_it(echo, body, param, message):
    data = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(f"{echo.url}/chat/completions", content=data, timeout=10)
    assert r.status_code == 400, r.text
    error = error_shape(r.json())
    assert message in error["message"] and error["param"] == param
    assert echo.batcher.batch_sizes == []


@pytest.mark.parametrize(
    ("prompt", "message"),
    [
        (None, "Missing required parameter: 'prompt'"),
        ("", "'prompt' must be a non-empty string"),
        ([""], "'prompt' must be a non-empty string"),
        (["a", "b"], "'prompt' must be one string; send one request per prompt (2 given)"),
    ],
)
def test_an_empty_or_missing_prompt_is_a_400(echo, prompt, message):
    body = {"model": "echo"} | ({} if prompt is None else {"prompt": prompt})
    r = httpx.post(f"{echo.url}/completions", json=body, timeout=10)
    assert r.status_code == 400 and message in error_shape(r.json())["message"]
    assert r.json()["error"]["param"] == "prompt"


def test_text_parts_are_read_as_the_messages_content(echo):
    client = openai.OpenAI(base_url=echo.url, api_key="x", max_retries=0)
    parts = [{"type": "text", "text": "ab"}, {"type": "text", "text": "c"}]
    r = client.chat.completions.create(model="echo", messages=[{"role": "user", "content": parts}])
    assert r.choices[0].message.content == "cba"


def test_the_tiny_model_answers_empty_input_with_400_not_500(policy):
    with PolicyServer(policy, port=0) as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="'prompt' must be a non-empty string"):
            client.completions.create(model=MODEL, prompt="", max_tokens=4)
        with pytest.raises(openai.BadRequestError, match="'messages' gives an empty prompt"):
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": ""}], max_tokens=4
            )
        with pytest.raises(openai.BadRequestError, match=r"parameter: 'messages\[0\].content'"):
            client.chat.completions.create(model=MODEL, messages=[{"role": "user"}], max_tokens=4)


def test_ipv6_loopback_is_served_with_a_bracketed_url():
    try:
        server = PolicyServer(Echo(), host="::1", port=0)
    except Exception as err:  # a machine without IPv6
        pytest.skip(f"no IPv6 loopback: {err}")
    with server:
        assert server.url == f"http://[::1]:{server.port}/v1"
        assert httpx.get(f"{server.url}/models", timeout=10).json()["data"][0]["id"] == "echo"
