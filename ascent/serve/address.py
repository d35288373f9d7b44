"""Where `ascent serve` listens: `--host` and `--port` checked before the model loads.

A port out of range, a port in use, a host that does not resolve or is not this machine's
each become one line with the fix and exit code 2 (an `AscentError`), not a traceback after
the model has loaded. The host is resolved in a thread that is waited on for at most
`RESOLVE_TIMEOUT_SEC`, so a resolver that does not answer cannot hang startup.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import threading
from typing import Any

from ascent.errors import AscentError

RESOLVE_TIMEOUT_SEC = 5.0  # longest wait for --host to resolve
HOST_FIX = "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"

Address = tuple[socket.AddressFamily, str]  # what to bind: family and numeric address


def listen_address(host: str, port: int, timeout: float | None = None) -> Address:
    """The family and numeric address to bind for `host`; refused (AscentError) when the port
    is out of range or the host does not resolve within `timeout` (RESOLVE_TIMEOUT_SEC)."""
    if not 0 <= port <= 65535:
        raise AscentError(
            f"--port {port} is not a TCP port: use one in 1-65535 (e.g. 8000), or 0 for a free one"
        )
    name = host.strip().strip("[]")
    if not name:
        return socket.AF_INET, ""  # every IPv4 interface
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return _lookup(host, RESOLVE_TIMEOUT_SEC if timeout is None else timeout)
    return (socket.AF_INET6 if ip.version == 6 else socket.AF_INET), str(ip)


def check_listen(host: str, port: int) -> Address:
    """`listen_address`, then one bind of it, so that a port in use or an address of another
    machine is reported before the model loads (the server binds it again to serve)."""
    family, address = listen_address(host, port)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind((address, port))
        except OSError as err:
            raise bind_error(err, host, port) from None
    return family, address


def bind_error(err: OSError, host: str, port: int) -> AscentError:
    """The one-line error, with its fix, for a bind that failed."""
    where = f"{host}:{port}" if host else f"port {port} on every interface"
    if err.errno == errno.EADDRINUSE:
        return AscentError(
            f"{where} is already in use (another ascent serve?); stop that server, pick another "
            "--port, or pass --port 0 for a free one"
        )
    if err.errno == errno.EACCES:
        return AscentError(
            f"{where}: not allowed for this user (ports below 1024 need privileges); pick "
            "--port 1024 or above, e.g. 8000"
        )
    if err.errno == errno.EADDRNOTAVAIL:
        return AscentError(f"--host {host}: not an address of this machine; {HOST_FIX}")
    return AscentError(f"cannot listen on {where}: {err.strerror or err}; check --host and --port")


def _lookup(host: str, timeout: float) -> Address:
    """Resolve a host name in a daemon thread, waiting at most `timeout`; IPv4 is preferred,
    as a server that bound only IPv4 always did for names such as localhost."""
    found: list[Any] = []

    def resolve() -> None:
        try:
            found.append(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError, ValueError) as err:  # unknown, too long, a NUL byte
            found.append(err)

    thread = threading.Thread(target=resolve, name="ascent-resolve-host", daemon=True)
    thread.start()
    thread.join(timeout)
    if not found:
        raise AscentError(
            f"--host {host}: no answer from the resolver within {timeout:g} s; give a numeric "
            f"address: {HOST_FIX}"
        )
    result = found[0]
    if isinstance(result, Exception):
        reason = getattr(result, "strerror", None) or str(result)
        raise AscentError(f"--host {host}: cannot resolve it ({reason}); {HOST_FIX}")
    result.sort(key=lambda info: info[0] != socket.AF_INET)
    family, *_, sockaddr = result[0]
    return family, sockaddr[0]
