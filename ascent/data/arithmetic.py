"""Built-in task: multi-digit arithmetic, `07+45=` -> `52` (or, through a prompt template
over its columns, `What is 7 + 45?`).

Operands are zero-padded to a fixed number of digits, so every prompt of a run has the same
length (no padding, and the model need not learn where a number starts). Answers are plain
integers, scored by the math reward's answer extraction and equivalence check.
"""

from __future__ import annotations

import random

from ascent.config.data import ArithmeticSection
from ascent.data.problems import Problem, is_held_out

_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def evaluate(a: int, op: str, b: int) -> int:
    """The result of `a op b` (op one of + - *)."""
    return _APPLY[op](a, b)


def arithmetic_problem(a: int, op: str, b: int, digits: int) -> Problem:
    """The zero-padded equation is the prompt (what the tiny model reads); the operands and
    operator are also columns, unpadded, for a prompt template in words
    (`What is {a} {op} {b}?`, for a real instruct model)."""
    key = f"{a:0{digits}d}{op}{b:0{digits}d}"
    columns = {"a": str(a), "op": op, "b": str(b)}
    return Problem(key=key, prompt=f"{key}=", answer=str(evaluate(a, op, b)), columns=columns)


ENUMERATE_LIMIT = 2_000_000  # problem spaces up to this size are listed, not sampled


def _held_out_pool(cfg: ArithmeticSection) -> list[Problem]:
    high = 10**cfg.digits
    every = (
        arithmetic_problem(a, op, b, cfg.digits)
        for op in cfg.operators
        for a in range(high)
        for b in range(high)
    )
    return [p for p in every if is_held_out(p.key)]


def sample_arithmetic(
    cfg: ArithmeticSection, n: int, *, held_out: bool, seed: int, distinct: bool
) -> list[Problem]:
    """`n` problems from one split; `distinct` forbids repeats (used for evaluation sets).

    Training problems are drawn with repeats (2-digit addition has only 10,000). A distinct
    set from a small space is drawn from the listed split, so asking for more problems than
    the split holds is an error rather than an endless search.
    """
    rng = random.Random(seed)
    space = (10**cfg.digits) ** 2 * len(cfg.operators)
    if distinct and held_out and space <= ENUMERATE_LIMIT:
        pool = _held_out_pool(cfg)
        if n > len(pool):
            raise ValueError(
                f"eval_size: {n} distinct held-out problems asked, but {cfg.digits}-digit "
                f"arithmetic has {len(pool)}; lower [data] eval_size or raise "
                "[data.arithmetic] digits"
            )
        return rng.sample(pool, n)
    high = 10**cfg.digits - 1
    problems: list[Problem] = []
    seen: set[str] = set()
    while len(problems) < n:
        a, b = rng.randint(0, high), rng.randint(0, high)
        problem = arithmetic_problem(a, rng.choice(cfg.operators), b, cfg.digits)
        if is_held_out(problem.key) != held_out or (distinct and problem.key in seen):
            continue
        seen.add(problem.key)
        problems.append(problem)
    return problems
