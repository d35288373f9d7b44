"""Process settings: glibc gives large freed blocks back once ascent has fixed its threshold.

Checked in a fresh interpreter each time (the setting is process-wide and one-way), through
glibc's own accounting: `mallinfo2().hblks` counts the blocks served by mappings of their
own.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
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
