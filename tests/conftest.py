"""Shared test fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from ascent.data.bundled import bundled_dir

# Two-core machines: one torch thread keeps tests fast while sandbox workers run beside them.
torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Ray workers at the trainer's priority, as `ascent.cluster.runtime.connect` starts them (the
# Ray tests start their local Ray themselves).
os.environ.setdefault("RAY_worker_niceness", "0")

PROJECT_ROOT = Path(__file__).resolve().parents[1]


SLOW_TIMEOUT_S = 1200  # a slow test's limit unless it sets its own


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`slow` tests (minutes-long end-to-end runs) run only when selected: `pytest -m slow`.
    The plain suite stays under 10 minutes on 2 cores."""
    selected = config.getoption("markexpr") or ""
    if "slow" in selected and "not slow" not in selected:
        for item in items:  # a learning run may take minutes: the suite's 300 s is too short
            if "slow" in item.keywords and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        return
    skip = pytest.mark.skip(reason="an end-to-end run of a minute or more: run with -m slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _denormals_as_torch_starts():
    """Runs flush denormals process-wide (ascent.runtime); hypothesis refuses to draw
    floats in a process that does, so every test starts from torch's default."""
    torch.set_flush_denormal(False)


@pytest.fixture
def shared_data() -> Path:
    """The real data sets bundled in the package (ascent/assets/data)."""
    return bundled_dir()


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


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """An empty working directory, where `ascent train` would create runs/."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return work


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The shipped real model (ascent:smollm2-135m), converted once per machine into the user's
    cache (scripts/setup.sh installs its package). For tests where a real BPE tokenizer, chat
    template or 134 M-parameter model matters; the tiny model stays the fast default."""
    from ascent.models import resolve_model_path
    from ascent.models.smollm2 import SMOLLM2

    return Path(resolve_model_path(SMOLLM2))


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_dir):
    """SmolLM2's tokenizer as ascent loads it (left padding, pad token set)."""
    from ascent.config.llm_sections import ModelSection
    from ascent.models import load_tokenizer

    return load_tokenizer(ModelSection(name_or_path=str(smollm2_dir)))
