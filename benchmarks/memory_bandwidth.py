"""How fast this machine's cores read memory, against the copy that `real_model.py`'s limit
takes its bandwidth from.

A decode step mostly reads (weights and KV cache) and writes little, while the limit in
`benchmarks/real_model.py` measures bandwidth by copying 1 GiB with torch (bytes read +
written). This script asks whether reads alone can move as much, and how: a C loop (built
here with the machine's `cc -O3 -march=native -fopenmp`, run on --threads OpenMP threads)
sums a 1 GiB buffer plainly, with 2 or 4 streams per thread, and with a software prefetch
2 KB ahead; torch's float32 sum and copy run for comparison. Each figure is the best of 5
passes over the buffer (larger than the last-level cache). The buffer holds float32 ones,
so each loop's sum says whether it read every value once (it stops the script otherwise).

    .venv/bin/python benchmarks/memory_bandwidth.py [--threads 2] [--mib 1024]

Needs a C compiler ($CC, cc or gcc; the C loops are skipped with the reason otherwise).
Last line: one JSON object, each figure in GB/s and as a ratio to torch's copy.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from ascent.rollout.native import c_compiler

SOURCE = r"""
#include <stdint.h>
#include <string.h>
#include <omp.h>
typedef float vf __attribute__((vector_size(64)));

/* Sum `bytes` of `data` on `threads` threads, each its own contiguous share read as
 * `streams` interleaved streams, prefetching `ahead` bytes ahead of each (0: none). */
float read_sum(const char *data, int64_t bytes, int streams, int64_t ahead, int threads) {
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
        const int64_t share = (bytes / omp_get_num_threads()) & ~(int64_t)4095;
        const char *base = data + omp_get_thread_num() * share;
        const int64_t per = (share / streams) & ~(int64_t)63;
        vf acc[4] = {{0}};
        for (int64_t at = 0; at < per; at += 64)
            for (int s = 0; s < streams; s++) {
                const char *p = base + s * per + at;
                if (ahead) __builtin_prefetch(p + ahead, 0, 3);
                vf v;
                memcpy(&v, p, sizeof v);
                acc[s & 3] += v;
            }
        for (int l = 0; l < 16; l++) total += acc[0][l] + acc[1][l] + acc[2][l] + acc[3][l];
    }
    return total;
}
"""


def build(workdir: Path) -> ctypes.CDLL | None:
    compiler = c_compiler()
    if compiler is None:
        return None
    source, library = workdir / "read.c", workdir / "read.so"
    source.write_text(SOURCE)
    flags = ["-O3", "-march=native", "-fopenmp", "-fPIC", "-shared"]
    done = subprocess.run([compiler, *flags, str(source), "-o", str(library)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        return None
    lib = ctypes.CDLL(str(library))
    lib.read_sum.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int64,
                             ctypes.c_int]  # fmt: skip
    lib.read_sum.restype = ctypes.c_float
    return lib


def covered_bytes(size: int, streams: int, threads: int) -> int:
    """The bytes `read_sum` reads: each thread's share and each stream whole cache lines."""
    share = (size // threads) & ~4095
    return threads * streams * ((share // streams) & ~63)


def best_seconds(fn, passes: int = 5) -> float:
    fn()
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mib", type=int, default=1024, help="buffer size (MiB), 8 to 4096")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: give 1 or more")
    if not 8 <= args.mib <= 4096:  # above 4 GiB a float32 lane's count of ones is inexact
        parser.error(f"--mib {args.mib}: give 8 to 4096")
    torch.set_num_threads(args.threads)
    size = args.mib << 20
    src = torch.ones(size // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    gbs: dict[str, float | None] = {
        "torch_copy_read_plus_written": 2 * size / best_seconds(lambda: dst.copy_(src)) / 1e9,
        "torch_float32_sum": size / best_seconds(lambda: src.sum()) / 1e9,
    }
    skipped = None
    with tempfile.TemporaryDirectory() as tmp:
        lib = build(Path(tmp))
        if lib is None:
            skipped = "no C compiler, or the build failed"
        else:
            ptr = src.data_ptr()
            for name, streams, ahead in [("c_plain", 1, 0), ("c_2_streams", 2, 0),
                                         ("c_4_streams", 4, 0), ("c_prefetch_2k", 1, 2048),
                                         ("c_2_streams_prefetch_2k", 2, 2048)]:  # fmt: skip
                covered = covered_bytes(size, streams, args.threads)
                total = lib.read_sum(ptr, size, streams, ahead, args.threads)
                if total != covered // 4 or covered < 0.99 * size:
                    raise SystemExit(f"{name} summed {total} of {covered // 4} ones: a bug")
                seconds = best_seconds(
                    lambda s=streams, a=ahead: lib.read_sum(ptr, size, s, a, args.threads)
                )
                gbs[name] = covered / seconds / 1e9
    reference = gbs["torch_copy_read_plus_written"]
    for name, value in gbs.items():
        shown = "skipped" if value is None else f"{value:6.1f} GB/s  {value / reference:.2f}x"
        print(f"{name:30s} {shown}")
    if skipped:
        print(f"C read loops skipped: {skipped}")
    reads = [v for k, v in gbs.items() if k != "torch_copy_read_plus_written" and v]
    print(json.dumps({
        "threads": args.threads, "mib": args.mib, "gb_per_s": gbs,
        "vs_torch_copy": {k: v / reference for k, v in gbs.items() if v is not None},
        "best_read_vs_torch_copy": max(reads) / reference,
        "skipped": skipped,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
