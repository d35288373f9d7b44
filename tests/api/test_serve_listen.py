"""`ascent serve` with a --host or --port it cannot listen on: one line, exit code 2, at once.

Each was a traceback (after the model had loaded), and a host that did not resolve once hung
for a minute.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from ascent.errors import AscentError
from ascent.serve import address
from ascent.serve.server import PolicyServer
from tests.api.test_serve import Echo

HOST_FIX = "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"


def serve(run_cli, *args: str) -> tuple[int, str, float]:
    """`ascent serve ascent:tiny ARGS`: exit code, the error output, seconds taken."""
    start = time.monotonic()
    code, out, err = run_cli("serve", "ascent:tiny", "--device", "cpu", *args)
    assert out == "" and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("error: "), err  # one line
    return code, err.removeprefix("error: ").rstrip("\n"), time.monotonic() - start


@pytest.mark.parametrize("port", ["70000", "-1", "65536"])
def test_a_port_out_of_range_is_one_line_with_the_fix(run_cli, port):
    code, err, took = serve(run_cli, "--port", port)
    assert code == 2 and took < 2
    assert (
        err
        == f"--port {port} is not a TCP port: use one in 1-65535 (e.g. 8000), or 0 for a free one"
    )


def test_a_port_in_use_is_one_line_before_the_model_loads(run_cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err, took = serve(run_cli, "--port", str(port))
    assert code == 2 and took < 2
    assert err == (
        f"127.0.0.1:{port} is already in use (another ascent serve?); stop that server, pick "
        "another --port, or pass --port 0 for a free one"
    )


@pytest.mark.parametrize(
    ("host", "message"),
    [
        ("no-such-host.invalid", "--host no-such-host.invalid: cannot resolve it"),
        ("not a host!", "--host not a host!: cannot resolve it"),
        ("192.0.2.1", "--host 192.0.2.1: not an address of this machine"),  # TEST-NET-1
    ],
)
def test_a_bad_host_is_one_line_with_the_fix(run_cli, host, message):
    code, err, took = serve(run_cli, "--host", host, "--port", "0")
    assert code == 2 and took < 10
    assert err.startswith(message) and err.endswith(HOST_FIX)


def test_a_host_the_resolver_never_answers_for_fails_in_bounded_time(run_cli, monkeypatch):
    unblock = threading.Event()

    def hanging_resolver(*args, **kwargs):
        unblock.wait(60)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hanging_resolver)
    monkeypatch.setattr(address, "RESOLVE_TIMEOUT_SEC", 0.3)
    try:
        code, err, took = serve(run_cli, "--host", "slow.example", "--port", "0")
    finally:
        unblock.set()
    assert code == 2 and took < 3
    assert err == (
        "--host slow.example: no answer from the resolver within 0.3 s; give a numeric "
        f"address: {HOST_FIX}"
    )


def test_max_batch_below_1_is_one_line(run_cli):
    code, err, _ = serve(run_cli, "--max-batch", "0", "--port", "0")
    assert code == 2 and err.startswith("--max-batch 0: must be at least 1")


def test_policy_server_refuses_a_bad_port_as_an_ascent_error():
    with pytest.raises(AscentError, match="--port 70000 is not a TCP port"):
        PolicyServer(Echo(), port=70000)
    with (
        PolicyServer(Echo(), port=0) as running,
        pytest.raises(AscentError, match="is already in use"),
    ):
        PolicyServer(Echo(), port=running.port)
