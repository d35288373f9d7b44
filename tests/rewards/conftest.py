"""Shared fixtures: the real data sets, and sandbox pools started once per module."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascent.config.rewards import SandboxSection
from ascent.data.bundled import bundled_dir
from ascent.errors import AscentError
from ascent.rewards.sandbox import SandboxPool, check_isolation

DATA = bundled_dir()  # the real data sets shipped in the package


def data_file(name: str) -> Path:
    return DATA / name


def read_jsonl(name: str) -> list[dict]:
    path = data_file(name)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def isolation_or_skip(cfg: SandboxSection) -> None:
    """Skip (with the reason) where this machine cannot isolate programs."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    try:
        check_isolation(cfg)
    except AscentError as err:
        pytest.skip(f"sandbox isolation unavailable here: {err}")


# Short limits keep the tests that hit them fast: 500 ms CPU, 1 s wall.
FAST = SandboxSection(workers=2, time_limit_ms=500, memory_mb=256)


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    isolation_or_skip(FAST)
    with SandboxPool(FAST) as p:
        yield p
