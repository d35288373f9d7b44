"""Shared pieces of the evaluation tests: real data, configs, a scripted endpoint."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ascent.config.rewards import SandboxSection
from ascent.data.bundled import bundled_dir
from ascent.errors import AscentError
from ascent.rewards.sandbox import check_isolation
from tests.api.scripted_server import Reply, ScriptedServer, Seen, models_body, ok

DATA = bundled_dir()  # the real data sets shipped in the package
PROJECT = Path(__file__).resolve().parents[2]
CHAT = "/v1/chat/completions"
MODELS = "/v1/models"
KEY_VAR = "ASCENT_EVAL_TEST_KEY"


def data_file(name: str) -> Path:
    return DATA / name


@pytest.fixture
def sandbox() -> None:
    """Skip (with the reason) where this machine cannot isolate programs."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    try:
        check_isolation(SandboxSection())
    except AscentError as err:
        pytest.skip(f"sandbox isolation unavailable here: {err}")


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        srv.default(MODELS, Reply(200, models_body("m")))
        yield srv


def write_config(
    tmp_path: Path,
    problems: Path,
    base_url: str,
    eval_keys: str = "",
    *,
    api_keys: str = 'api_key_env = ""',
) -> Path:
    """An LLM config evaluating the `solver` role at `base_url` (fast retries)."""
    text = f"""
[api]
base_url = "{base_url}"
{api_keys}
max_retries = 1
backoff_sec = 0.01
timeout_sec = 20

[models]
solver_model = "m"

[rollout]
async_workers = 4

[sandbox]
workers = 2
time_limit_ms = 1000

[logging]
progress = true

[eval]
problems = "{problems}"
policy = "api"
role = "solver"
output_dir = "{tmp_path / "out"}"
{eval_keys}
"""
    path = tmp_path / "eval.toml"
    path.write_text(text)
    return path


def prompt_of(seen: Seen) -> str:
    return seen.body["messages"][-1]["content"]


def router(answer: Callable[[str], Reply]) -> Callable[[Seen], Reply]:
    """A default reply computed from the request's prompt."""
    return lambda seen: answer(prompt_of(seen))


def fenced(code: str) -> Reply:
    return ok(f"Here it is:\n```python\n{code}\n```\n")


def read_results(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "eval_results.json").read_text())


def read_transcripts(tmp_path: Path) -> list[dict]:
    lines = (tmp_path / "out" / "transcripts.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]
