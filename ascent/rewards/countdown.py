"""The Countdown reward: does the expression use each given number once and hit the target?

The expression is taken from the last `<answer>...</answer>` in the completion, else from its
first line (a trailing `= 31` is ignored). It is parsed with `ast` and evaluated by a walker
that knows only integer literals, + - * / and parentheses, in exact fractions: nothing is
ever passed to `eval`, so a completion cannot run code, and without powers or names its
value stays small. As in TinyZero, the numbers used must be exactly the numbers given.
"""

from __future__ import annotations

import ast
import operator
import re
from fractions import Fraction
from typing import Any

from ascent.config.rewards import RewardSection, SandboxSection
from ascent.rewards.base import REWARDS, Scored, column, completion_text

CORRECT_REWARD = 1.0
WRONG_REWARD = -1.0
MAX_EXPRESSION_CHARS = 200

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


class _Invalid(ValueError):
    """The expression is not a Countdown expression (the message says why)."""


def extract_expression(text: str) -> str:
    tagged = _ANSWER_TAG.findall(text)
    candidate = tagged[-1] if tagged else text.strip().split("\n", 1)[0]
    return candidate.split("=", 1)[0].strip()


def _evaluate(node: ast.AST, used: list[int]) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _evaluate(node.left, used), _evaluate(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise _Invalid("division by zero")
        return _OPS[type(node.op)](left, right)
    raise _Invalid(f"'{type(node).__name__}' is not allowed (only integers, + - * / and brackets)")


def check_expression(expression: str, numbers: list[int], target: int) -> tuple[bool, str]:
    """(correct, outcome) for one expression; outcome names what went wrong."""
    if not expression:
        return False, "no_expression"
    if len(expression) > MAX_EXPRESSION_CHARS:
        return False, "too_long"
    try:
        tree = ast.parse(expression, mode="eval")
        used: list[int] = []
        value = _evaluate(tree.body, used)
    except (SyntaxError, _Invalid, RecursionError):
        return False, "unparseable"
    if sorted(used) != sorted(numbers):
        return False, "wrong_numbers"
    return (True, "equal") if value == target else (False, "wrong_value")


class CountdownReward:
    """`f(prompts, completions, numbers, target, **columns)`: 1.0 if correct, else -1.0."""

    def __call__(
        self, prompts: list[Any], completions: list[Any], **columns: list[Any]
    ) -> list[float | None]:
        return self.score(prompts, completions, **columns).values

    def score(self, prompts: list[Any], completions: list[Any], **columns: list[Any]) -> Scored:
        n = len(completions)
        numbers = column(columns, "numbers", n, "countdown")
        targets = column(columns, "target", n, "countdown")
        values: list[float | None] = []
        details: list[dict[str, Any]] = []
        for completion, nums, target in zip(completions, numbers, targets, strict=True):
            expression = extract_expression(completion_text(completion))
            correct, outcome = check_expression(expression, list(nums), int(target))
            values.append(CORRECT_REWARD if correct else WRONG_REWARD)
            details.append({"extracted": expression, "outcome": outcome, "correct": correct})
        return Scored(values, details)


@REWARDS.register("countdown", columns=("numbers", "target"))
def build_countdown_reward(
    reward_cfg: RewardSection, sandbox_cfg: SandboxSection
) -> CountdownReward:
    return CountdownReward()
