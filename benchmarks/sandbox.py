"""Throughput of the code sandbox against plain, unisolated subprocess runs.

    python benchmarks/sandbox.py [--runs 400] [--workers N] [--rounds 3]

Both sides run the same short stdin/stdout Python program (read two numbers, print the sum)
`--runs` times with the same number of parallel workers, and every output is checked.

- isolated: `SandboxPool` with full isolation (bubblewrap, rlimits, unprivileged uid, private
  temp dir, cleared environment, everything killed after each run); each worker prepares the
  program once and runs it `runs / workers` times, as the code reward runs a solution's tests.
- plain: `subprocess.run([python, "-I", "-S", file])` from a thread pool of the same size (the
  fastest plain start: no site import).
- one-shot (reported, not in the ratio): prepare + run + drop per run, as `run_program` does.

Rounds alternate isolated and plain so that load from other processes hits both alike; the
medians are reported. The last line is one JSON object with `ratio` (isolated / plain),
`isolated_runs_per_s` and `plain_runs_per_s`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ascent.config.rewards import SandboxSection
from ascent.rewards.sandbox import Limits, SandboxPool, Worker, pool_size
from ascent.rewards.sandbox.isolation import python_executable

PROGRAM = "a, b = map(int, input().split())\nprint(a + b)\n"


def case(i: int) -> tuple[str, str]:
    return f"{i} {2 * i}\n", f"{3 * i}"


def isolated(pool: SandboxPool, runs: int) -> float:
    limits = Limits.for_run(pool.cfg)

    def batch(worker: Worker, indices: range) -> None:
        program = worker.prepare(PROGRAM, "python")
        try:
            for i in indices:
                stdin, want = case(i)
                result = worker.run(program, stdin, limits)
                if result.status != "ok" or result.stdout.strip() != want:
                    raise RuntimeError(f"isolated run {i}: {result}")
        finally:
            worker.drop(program)

    start = time.perf_counter()
    futures = [
        pool.submit(lambda w, k=k: batch(w, range(k, runs, pool.size))) for k in range(pool.size)
    ]
    for future in futures:
        future.result()
    return runs / (time.perf_counter() - start)


def one_shot(pool: SandboxPool, runs: int) -> float:
    start = time.perf_counter()
    futures = [pool.submit_program(PROGRAM, "python", case(i)[0]) for i in range(runs)]
    for i, future in enumerate(futures):
        result = future.result()
        if result.status != "ok" or result.stdout.strip() != case(i)[1]:
            raise RuntimeError(f"one-shot run {i}: {result}")
    return runs / (time.perf_counter() - start)


def plain(path: Path, runs: int, workers: int) -> float:
    python = python_executable()

    def one(i: int) -> None:
        stdin, want = case(i)
        done = subprocess.run(
            [python, "-I", "-S", str(path)], input=stdin, capture_output=True, text=True
        )
        if done.returncode != 0 or done.stdout.strip() != want:
            raise RuntimeError(f"plain run {i}: {done}")

    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as executor:
        list(executor.map(one, range(runs)))
    return runs / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict[str, float | int | str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="runs per round and side")
    parser.add_argument("--workers", type=int, default=0, help="pool size (0: one per core)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    args = parser.parse_args(argv)
    cfg = SandboxSection(workers=args.workers)
    workers = pool_size(cfg)
    rates: dict[str, list[float]] = {"isolated": [], "plain": [], "one_shot": []}
    with tempfile.TemporaryDirectory() as tmp, SandboxPool(cfg) as pool:
        path = Path(tmp) / "main.py"
        path.write_text(PROGRAM)
        isolated(pool, 2 * workers)  # start the workers outside the timing
        for r in range(args.rounds):
            rates["isolated"].append(isolated(pool, args.runs))
            rates["plain"].append(plain(path, args.runs, workers))
            rates["one_shot"].append(one_shot(pool, args.runs))
            print(
                f"round {r + 1}: isolated {rates['isolated'][-1]:.0f}/s, "
                f"plain {rates['plain'][-1]:.0f}/s, one-shot {rates['one_shot'][-1]:.0f}/s",
                file=sys.stderr,
            )
    median = {name: statistics.median(values) for name, values in rates.items()}
    report: dict[str, float | int | str] = {
        "ratio": round(median["isolated"] / median["plain"], 2),
        "isolated_runs_per_s": round(median["isolated"], 1),
        "plain_runs_per_s": round(median["plain"], 1),
        "one_shot_runs_per_s": round(median["one_shot"], 1),
        "one_shot_ratio": round(median["one_shot"] / median["plain"], 2),
        "runs": args.runs,
        "workers": workers,
        "rounds": args.rounds,
        "isolation": "unsafe_local" if cfg.unsafe_local else "bubblewrap",
    }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
