"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Two-core machines: one torch thread keeps tests fast while sandbox workers run beside them.
torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The real data sets in ../shared/data; tests that need them skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data folder {SHARED_DATA} is absent (see ../shared/data/README.md)")
    return SHARED_DATA


@pytest.fixture
def run_cli(capsys):
    """Run the `ascent` CLI in-process; return (exit code, stdout, stderr)."""
    from ascent.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return code, out, err

    return run
