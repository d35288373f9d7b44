"""Fixtures for agentic episodes: a printable character tokenizer, a scripted policy, code
problems, and one sandbox pool per module."""

from __future__ import annotations

import string
from collections.abc import Iterator

import pytest

from ascent.config.rewards import CodeRewardSection, SandboxSection
from ascent.data import Problem
from ascent.models import build_char_tokenizer
from ascent.rewards.sandbox import SandboxPool
from ascent.rollout.agentic.episode import EpisodeRunner, EpisodeSettings
from ascent.rollout.agentic.format_registry import FORMATS
from ascent.rollout.agentic.roles import Generated
from ascent.rollout.agentic.verify import Verifier
from tests.rewards.conftest import isolation_or_skip

SANDBOX = SandboxSection(workers=2, time_limit_ms=1000, memory_mb=256)
REFERENCE = "print(int(input()) * 2)\n"


def double_problem(reference: str | None = REFERENCE, factor: int = 2) -> Problem:
    """Read n, print 2n: one sample test, two hidden tests, a reference solution in Python.
    Another `factor` gives a different problem under the same id."""
    columns = {
        "sample_tests": [{"input": "1\n", "output": f"{factor}\n"}],
        "tests": [
            {"input": "3\n", "output": f"{3 * factor}\n"},
            {"input": "10\n", "output": f"{10 * factor}\n"},
        ],
    }
    if reference is not None:
        columns |= {"reference_solution": reference, "reference_language": "python"}
    return Problem(key="double", prompt="Read n; print 2n.", answer="", columns=columns)


def fenced(code: str) -> str:
    return f"```python\n{code}```"


class ScriptedPolicy:
    """Stands in for the trained policy: answers each role from a list, in order."""

    def __init__(self, tokenizer, answers: dict[str, list[str]], version: int = 3) -> None:
        self.tokenizer = tokenizer
        self.answers = {role: list(texts) for role, texts in answers.items()}
        self.version = version
        self.contexts: list[list[int]] = []

    async def generate(self, context: list[int]) -> Generated:
        self.contexts.append(list(context))
        role = self.role_of(context)
        text = self.answers[role].pop(0)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids.append(self.tokenizer.eos_token_id)
        return Generated(ids, [-0.5] * len(ids), True, text, self.version)

    def role_of(self, context: list[int]) -> str:
        text = self.tokenizer.decode(context, skip_special_tokens=True)
        for role, marker in (("summarizer", "You compress"), ("testgen", "You write tests")):
            if text.startswith(marker):
                return role
        return "solver"


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    isolation_or_skip(SANDBOX)
    with SandboxPool(SANDBOX) as p:
        yield p


@pytest.fixture
def tokenizer():
    return build_char_tokenizer(string.printable)


def settings(**changes) -> EpisodeSettings:
    base = {
        "roles": {"hypothesis": "off", "solver": "policy", "testgen": "off", "summarizer": "off"},
        "max_turns": 3,
        "summarize_threshold": 10_000,
        "context_window": 20_000,
        "max_new_tokens": 64,
        "adversarial_penalty": -0.5,
        "unparsable_reward": -0.1,
        "max_generated_tests": 5,
        "default_language": "python",
    }
    return EpisodeSettings(**(base | changes))


def runner(pool, tokenizer, policy, fmt: str = "code", chat=None, **changes) -> EpisodeRunner:
    verifier = Verifier(pool, CodeRewardSection(), SANDBOX)
    return EpisodeRunner(
        settings(**changes), FORMATS.get(fmt), verifier, tokenizer, policy, None, chat
    )
