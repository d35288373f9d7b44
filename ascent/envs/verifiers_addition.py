"""A single-turn verifiers environment: add two numbers. Needs `ascent[verifiers]`.

    [data] path = "verifiers:ascent.envs.verifiers_addition"

Written the way prime-rl's environments are: a module with `load_environment(**args)` that
returns a `vf.SingleTurnEnv` holding its dataset (question, answer, info) and a rubric whose
reward function gives 1 when the reply's last integer is the answer. The train and eval sets
are drawn from their own seeds, so they differ; `question` is how a problem is asked
(`{a}`, `{b}`: the operands), and `info` carries the operands zero-padded (`a`,
`b`), so a prompt template can pose the problem the way ascent's tiny model learnt to read it
("07+45=").
"""

from __future__ import annotations

import random
import re
from typing import Any

import verifiers as vf
from datasets import Dataset

_INTEGER = re.compile(r"-?\d+")


def last_integer(text: str) -> str | None:
    found = _INTEGER.findall(text or "")
    return found[-1] if found else None


def _rows(seed: int, size: int, digits: int, question: str) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for _ in range(size):
        a, b = rng.randrange(10**digits), rng.randrange(10**digits)
        pa, pb = f"{a:0{digits}d}", f"{b:0{digits}d}"
        info = {"a": pa, "b": pb}
        rows.append({"question": question.format(**info), "answer": str(a + b), "info": info})
    return rows


def correct_sum(completion: Any, answer: str, parser: vf.Parser) -> float:
    """1.0 when the reply's last integer is the sum, else 0.0."""
    return float(last_integer(parser.parse_answer(completion) or "") == answer)


def load_environment(
    digits: int = 2,
    num_train: int = 5000,
    num_eval: int = 500,
    system_prompt: str | None = None,
    question: str = "What is {a} + {b}?",
) -> vf.Environment:
    if not 1 <= digits <= 6:
        raise ValueError(f"digits must be 1-6, not {digits}")
    parser = vf.Parser(extract_fn=lambda text: text.strip())
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(_rows(1, num_train, digits, question)),
        eval_dataset=Dataset.from_list(_rows(2, num_eval, digits, question)),
        system_prompt=system_prompt,
        parser=parser,
        rubric=vf.Rubric(funcs=[correct_sum], parser=parser),
    )
