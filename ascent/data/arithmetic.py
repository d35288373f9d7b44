"""Built-in task: multi-digit arithmetic, `07+45=` -> `52`.

Operands are zero-padded to a fixed number of digits, so every prompt of a run has the same
length (no padding, and the model need not learn where a number starts). Answers are plain
integers, scored by the math reward's answer extraction and equivalence check.
"""

from __future__ import annotations

import random

from ascent.config.llm import ArithmeticSection
from ascent.data.problems import EVAL_BUCKETS, Problem, is_held_out

_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def arithmetic_problem(a: int, op: str, b: int, digits: int) -> Problem:
    key = f"{a:0{digits}d}{op}{b:0{digits}d}"
    return Problem(key=key, prompt=f"{key}=", answer=str(_APPLY[op](a, b)))


def sample_arithmetic(
    cfg: ArithmeticSection, n: int, *, held_out: bool, seed: int, distinct: bool
) -> list[Problem]:
    """`n` problems from one split; `distinct` forbids repeats (used for evaluation sets)."""
    space = (10**cfg.digits) ** 2 * len(cfg.operators)
    if distinct and n > space // EVAL_BUCKETS // 2:
        raise ValueError(
            f"eval_size: {n} distinct held-out problems asked, but {cfg.digits}-digit "
            f"arithmetic has only about {space // EVAL_BUCKETS}; lower [data] eval_size "
            "or raise [data.arithmetic] digits"
        )
    rng = random.Random(seed)
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
