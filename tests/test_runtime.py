"""Process settings: glibc gives large freed blocks back once ascent has fixed its threshold.

Checked in a fresh interpreter each time (the setting is process-wide and one-way), through
glibc's own accounting: `mallinfo2().hblks` counts the blocks served by mappings of their
own.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# glibc's malloc, free and mallinfo2, for the probes below (each in a fresh interpreter)
LIBC = """
import ctypes, os, sys
sys.path.insert(0, os.getcwd())
libc = ctypes.CDLL("libc.so.6")

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
"""

PROBE = (
    LIBC
    + """
if sys.argv[1] == "set":
    from ascent.runtime import return_large_blocks
    print("set", return_large_blocks(), file=sys.stderr)
size = 6 << 20
libc.free(libc.malloc(size))  # by default this raises the threshold above 6 MiB
before = libc.mallinfo2().hblks
block = libc.malloc(size)
print(libc.mallinfo2().hblks - before)  # 1: the block is a mapping of its own; 0: heap
libc.free(block)
"""
)


def mapped_blocks(mode: str, env: dict[str, str] | None = None) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env=env
    )
    return int(out.stdout.strip())


@pytest.fixture(autouse=True)
def glibc_only():
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's allocator only")
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallinfo2  # noqa: B018
    except (OSError, AttributeError):
        pytest.skip("needs glibc 2.33+ (mallinfo2)")


def test_without_it_a_freed_large_block_comes_back_from_the_heap():
    assert mapped_blocks("plain") == 0  # the dynamic threshold rose past the block's size


def test_with_it_every_large_block_is_a_mapping_of_its_own():
    assert mapped_blocks("set") == 1


def test_a_threshold_in_the_environment_is_left_alone():
    import os

    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(64 << 20)}
    assert mapped_blocks("set", env) == 0  # the user's 64 MiB holds: 6 MiB is a heap block


TRIM_PROBE = (
    LIBC
    + """
from ascent import runtime
if sys.argv[1] == "mmap-only":  # what fixing the mmap threshold alone leaves
    libc.mallopt(runtime.M_MMAP_THRESHOLD, runtime.MMAP_THRESHOLD_BYTES)
else:
    runtime.return_large_blocks()
block = libc.malloc(2 << 20)  # below the mmap threshold: from the heap's top
libc.free(block)
print(libc.mallinfo2().keepcost)  # free memory the heap kept at its top
"""
)


def kept_at_top(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def test_the_heap_keeps_a_freed_medium_block_instead_of_trimming_it_at_once():
    """A tensor between 128 KiB and the mmap threshold comes from the heap's top; freeing it
    must not hand the pages back only to fault them in again for the next one."""
    assert kept_at_top("mmap-only") < 1 << 20  # trimmed back to glibc's 128 KiB default
    assert kept_at_top("set") >= 2 << 20


PHASE_PROBE = (
    LIBC
    + """
from ascent import runtime

def mapped() -> int:
    size = 6 << 20
    libc.free(libc.malloc(size))  # by default this raises the threshold above 6 MiB
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    delta = libc.mallinfo2().hblks - before
    libc.free(block)
    return delta

if sys.argv[1] == "configured":
    runtime.configure_cpu(1)
with runtime.large_blocks_returned():
    inside = mapped()
print(inside, mapped())
"""
)


def mapped_inside_and_after(mode: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", PHASE_PROBE, mode], capture_output=True, text=True, check=True
    )
    inside, after = out.stdout.split()
    return int(inside), int(after)


def test_large_blocks_are_returned_inside_an_update_only_and_only_once_configured():
    """An update returns its large blocks; generation afterwards reuses the heap (mapping
    25 MB of logits anew every decode step cost 15%); a process ascent did not configure
    keeps glibc's own behaviour."""
    assert mapped_inside_and_after("configured") == (1, 0)
    assert mapped_inside_and_after("plain") == (0, 0)


FIRST_BLOCK_PROBE = (
    LIBC
    + """
from ascent import runtime

if sys.argv[1] == "configured":
    runtime.configure_cpu(1)
before = libc.mallinfo2().hblks
block = libc.malloc(20 << 20)  # a first large block, nothing freed before it
print(libc.mallinfo2().hblks - before)
libc.free(block)
"""
)


def test_generation_before_any_update_already_reuses_the_heap():
    """A configured process starts at glibc's ceiling: a first 20 MB block (a decode step's
    logits) comes from the heap, where glibc's own start (128 KiB, raised only by frees)
    maps it anew and faults its pages in."""

    def mapped(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", FIRST_BLOCK_PROBE, mode],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return int(out.stdout.strip())

    assert mapped("configured") == 0
    assert mapped("plain") == 1


SHAPES_PROBE = (
    LIBC
    + """
import torch
import torch.nn.functional as F

if sys.argv[1] == "configured":
    from ascent import runtime

    runtime.configure_cpu(1)
else:
    torch.set_num_threads(1)
weight = torch.randn(256, 256, dtype=torch.bfloat16)


def held_after(rows: range) -> int:
    for m in rows:  # each row count is a new shape to oneDNN: a primitive of its own
        F.linear(torch.randn(m, 256, dtype=torch.bfloat16), weight)
    info = libc.mallinfo2()
    return info.uordblks + info.hblkhd


held_after(range(1, 150))
start = held_after(range(150, 200))
print((held_after(range(200, 400)) - start) / 2**20)
"""
)


def test_onednn_primitive_caches_stop_growing_with_new_shapes():
    """Every micro-batch length and decode row count is a new shape to oneDNN, which keeps a
    primitive of about half a megabyte for each in two caches of 1,024 entries by default;
    once configured they hold 64, so 200 more shapes leave memory where it was. Where bf16
    products do not go through oneDNN's caches (the plain process does not grow), there is
    nothing to bound."""

    def growth_mb(mode: str) -> float:
        env = {k: v for k, v in os.environ.items() if not k.endswith("CACHE_CAPACITY")}
        out = subprocess.run([sys.executable, "-c", SHAPES_PROBE, mode], capture_output=True,
                             text=True, check=True, env=env)  # fmt: skip
        return float(out.stdout.strip())

    plain = growth_mb("plain")
    if plain < 40:
        pytest.skip(f"bf16 products here do not fill oneDNN's caches ({plain:.1f} MB)")
    assert growth_mb("configured") < plain / 5
