"""Built-in task: Countdown, `use 3 7 8 to make 31:` -> an expression such as `8*3+7`.

Each puzzle is made by drawing numbers and combining ALL of them, in a random order, with
random operations, so every puzzle has at least one solution; the target is that result.
The reward (`ascent.rewards.countdown`) accepts any expression that uses each given number
exactly once (the TinyZero rule) and evaluates to the target; the stored answer is one such
solution, kept for inspection only.
"""

from __future__ import annotations

import random
from fractions import Fraction

from ascent.config.data import CountdownSection
from ascent.data.problems import Problem, is_held_out

_OPS = "+-*/"


def _combine(rng: random.Random, numbers: list[int]) -> tuple[str, Fraction] | None:
    """A random expression over all `numbers` and its value; None if a step is not allowed."""
    expr, value = str(numbers[0]), Fraction(numbers[0])
    for n in numbers[1:]:
        op = rng.choice(_OPS)
        if op == "/" and (n == 0 or value % n):
            return None  # keep every intermediate an integer, as people play Countdown
        value = {"+": value + n, "-": value - n, "*": value * n, "/": value / n}[op]
        expr = (
            f"({expr}){op}{n}" if op in "*/" and any(c in expr for c in "+-") else f"{expr}{op}{n}"
        )
    return expr, value


def countdown_problem(numbers: list[int], target: int, solution: str) -> Problem:
    shown = " ".join(map(str, numbers))
    return Problem(
        key=f"{shown}>{target}",
        prompt=f"use {shown} to make {target}:",
        answer=solution,
        columns={"numbers": list(numbers), "target": target},
    )


def sample_countdown(
    cfg: CountdownSection, n: int, *, held_out: bool, seed: int, distinct: bool
) -> list[Problem]:
    """`n` solvable puzzles from one split, targets in [1, max_target]."""
    rng = random.Random(seed)
    problems: list[Problem] = []
    seen: set[str] = set()
    while len(problems) < n:
        numbers = [rng.randint(1, cfg.max_number) for _ in range(cfg.numbers)]
        made = _combine(rng, rng.sample(numbers, len(numbers)))
        if made is None or not (1 <= made[1] <= cfg.max_target) or made[1].denominator != 1:
            continue
        problem = countdown_problem(numbers, int(made[1]), made[0])
        if is_held_out(problem.key) != held_out or (distinct and problem.key in seen):
            continue
        seen.add(problem.key)
        problems.append(problem)
    return problems
