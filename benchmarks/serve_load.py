"""Latency of `ascent serve` under load: sequential requests, then many at once.

    python benchmarks/serve_load.py [--sequential 200] [--concurrent 64] [--max-tokens 16]

Starts `ascent serve ascent:tiny` on loopback in a subprocess (so the clients' threads do not
share its interpreter), warms it up, then sends
- `--sequential` chat completions one after another on one keep-alive connection, and
- `--concurrent` chat completions at once: one thread each, released together by a barrier,
  each then opening its own connection (the burst of connects an agentic round with that many
  episodes in flight makes, and that a short listen backlog resets).
Every request is greedy with the same `max_tokens`, so concurrent ones share generate calls
(at most `--max-batch` prompts each). Each phase prints its p50 / p99 latency and error count;
each request gives up after `--timeout` seconds, so the run is bounded. The server's stderr is
kept aside and its tracebacks counted (`server_tracebacks`, 0 expected).

Goals, for the concurrent phase: every request answered, and p99 under 2x p50 (a request that
arrives with the crowd waits at most about one batch longer than the median one). The last line
is one JSON object, with `goals` saying whether each is met.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import IO

MODEL = "ascent:tiny"


@dataclass
class Phase:
    """One phase's outcome: latencies of answered requests (seconds) and failures."""

    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall_sec: float = 0.0

    def summary(self) -> dict[str, float | int]:
        ordered = sorted(self.latencies)
        p50 = statistics.median(ordered) if ordered else math.nan
        p99 = ordered[math.ceil(0.99 * len(ordered)) - 1] if ordered else math.nan
        return {
            "answered": len(ordered),
            "errors": len(self.errors),
            "p50_ms": round(1000 * p50, 1),
            "p99_ms": round(1000 * p99, 1),
            "p99_over_p50": round(p99 / p50, 2) if ordered else math.nan,
            "wall_s": round(self.wall_sec, 2),
        }


def start_server(max_batch: int, log: IO[str]) -> tuple[subprocess.Popen, str, int]:
    """`ascent serve` on a free loopback port, its stderr into `log`; the process, host, port."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TRANSFORMERS_VERBOSITY": "error"}
    command = [sys.executable, "-m", "ascent", "serve", MODEL, "--port", "0", "--device", "cpu"]
    proc = subprocess.Popen(
        [*command, "--max-batch", str(max_batch)],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()
    if not line.startswith(f"serving {MODEL} "):
        proc.kill()
        log.seek(0)
        raise RuntimeError(f"ascent serve did not start: {line!r}\n{log.read()[-2000:]}")
    address = line.split(" at http://")[1].split("/")[0]
    host, port = address.rsplit(":", 1)
    return proc, host, int(port)


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def request_body(i: int, max_tokens: int) -> bytes:
    messages = [{"role": "user", "content": f"{i % 90 + 10}+{i % 7 + 1}="}]
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    return json.dumps(body).encode()


def timed_request(conn: http.client.HTTPConnection, body: bytes, phase: Phase) -> None:
    """One chat completion on `conn`; its latency or its failure goes into `phase`."""
    headers = {"Content-Type": "application/json"}
    start = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        took = time.perf_counter() - start
        if response.status != 200:
            phase.errors.append(f"HTTP {response.status}: {data[:200]!r}")
        elif not json.loads(data)["choices"]:
            phase.errors.append("an answer without choices")
        else:
            phase.latencies.append(took)
    except (OSError, http.client.HTTPException, ValueError) as err:
        phase.errors.append(f"{type(err).__name__}: {err}")
        conn.close()


def sequential(host: str, port: int, count: int, max_tokens: int, timeout: float) -> Phase:
    phase = Phase()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    start = time.perf_counter()
    for i in range(count):
        timed_request(conn, request_body(i, max_tokens), phase)
    phase.wall_sec = time.perf_counter() - start
    conn.close()
    return phase


def concurrent(host: str, port: int, count: int, max_tokens: int, timeout: float) -> Phase:
    """`count` clients released together by a barrier, each opening its own connection: the
    burst of connects is what a short listen backlog resets."""
    phase = Phase()
    barrier = threading.Barrier(count + 1)

    def client(i: int) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        barrier.wait()
        timed_request(conn, request_body(i, max_tokens), phase)
        conn.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join(timeout + 5)
    phase.wall_sec = time.perf_counter() - start
    missing = count - len(phase.latencies) - len(phase.errors)
    phase.errors += ["no answer before the timeout"] * missing
    return phase


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequential", type=int, default=200, help="requests one at a time")
    parser.add_argument("--concurrent", type=int, default=64, help="requests sent at once")
    parser.add_argument("--max-tokens", type=int, default=16, help="max_tokens per request")
    parser.add_argument("--max-batch", type=int, default=32, help="ascent serve --max-batch")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    args = parser.parse_args(argv)
    with tempfile.TemporaryFile("w+") as log:
        proc, host, port = start_server(args.max_batch, log)
        try:
            sequential(host, port, 5, args.max_tokens, args.timeout)  # warm-up, not reported
            phases = {
                "sequential": sequential(
                    host, port, args.sequential, args.max_tokens, args.timeout
                ),
                "concurrent": concurrent(
                    host, port, args.concurrent, args.max_tokens, args.timeout
                ),
            }
        finally:
            stop_server(proc)
        log.seek(0)
        tracebacks = log.read().count("Traceback")
    figures = {name: phase.summary() for name, phase in phases.items()}
    for name, f in figures.items():
        print(
            f"{name}: {f['answered']} answered, {f['errors']} errors, p50 {f['p50_ms']} ms, "
            f"p99 {f['p99_ms']} ms (p99/p50 {f['p99_over_p50']}), {f['wall_s']} s in all"
        )
        for error in sorted(set(phases[name].errors))[:5]:
            print(f"  error: {error}")
    crowd = figures["concurrent"]
    report = {
        **{f"{name}_{k}": v for name, f in figures.items() for k, v in f.items()},
        "goals": {
            "all_concurrent_answered": crowd["answered"] == args.concurrent,
            "concurrent_p99_under_2x_p50": crowd["p99_over_p50"] < 2,
        },
        "server_tracebacks": tracebacks,
        "requests": {"sequential": args.sequential, "concurrent": args.concurrent},
        "max_tokens": args.max_tokens,
        "max_batch": args.max_batch,
        "model": MODEL,
    }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
