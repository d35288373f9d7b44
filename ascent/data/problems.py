"""The unit of data a run trains on: one prompt with what its reward needs to score it."""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ascent.errors import AscentError

EVAL_BUCKETS = 20  # 1 in 20 possible problems belongs to the held-out split
# A column of messages that come before the problem's own user message in a chat (a system
# prompt, few-shot turns), for sources whose prompts are conversations (verifiers').
CHAT_CONTEXT = "chat_context"


@dataclass(frozen=True)
class Problem:
    """One prompt and its reference data."""

    key: str  # canonical identity ("07+45"); equal keys are the same problem
    prompt: str  # the text the policy continues
    answer: str  # the gold answer (for math rewards and evaluation)
    # Extra reward columns, passed to reward functions by name (countdown: numbers, target).
    columns: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the [[data.sources]] name it came from ("": the run has one source)


def is_held_out(key: str) -> bool:
    """Whether a problem belongs to the held-out split, decided by its key alone.

    A hash of the key (not the run's seed, not a position in a list) decides, so no seed,
    size or generation order can ever put an evaluation problem into a training set: a
    warm-up trained with one seed is evaluated fairly by a run with another.
    """
    return zlib.crc32(key.encode()) % EVAL_BUCKETS == 0


def first_of_each_source(problems: list[Problem], n: int) -> list[Problem]:
    """The first `n` problems of each [[data.sources]] source (of the list, with one source):
    a sample to check prompts and columns on that does not miss a source listed later."""
    taken: dict[str, int] = {}
    out = []
    for problem in problems:
        if taken.get(problem.source, 0) < n:
            taken[problem.source] = taken.get(problem.source, 0) + 1
            out.append(problem)
    return out


def prompt_bytes(problem: Problem) -> int:
    """UTF-8 bytes of the problem's text, its chat context included: a bound a prompt's
    length check can use before tokenizing."""
    context = problem.columns.get(CHAT_CONTEXT) or ()
    texts = [problem.prompt, *(str(m.get("content") or "") for m in context)]
    return sum(len(t.encode("utf-8", "replace")) for t in texts)


def shuffled(problems: list[Problem], seed: int) -> list[Problem]:
    out = list(problems)
    random.Random(seed).shuffle(out)
    return out


def held_out_split(
    rows: list[Problem], held_rows: list[Problem] | None, eval_size: int, seed: int, eval_seed: int
) -> tuple[list[Problem], list[Problem]]:
    """(training, held-out) problems of a fixed set: the held-out ones are `eval_size` of
    `held_rows` (a validation set), or of `rows` when there is none, drawn with `eval_seed`
    so they do not move with the run's seed; the training ones are the rest in the run's
    seeded order, none sharing a held-out key. The caller checks the sizes."""
    if held_rows is not None:
        held, train = shuffled(held_rows, eval_seed)[:eval_size], rows
    else:
        order = shuffled(rows, eval_seed)
        held, train = order[:eval_size], order[eval_size:]
    held_keys = {p.key for p in held}
    return [p for p in shuffled(train, seed) if p.key not in held_keys], held


def reward_columns(problems: list[Problem]) -> dict[str, list[Any]]:
    """Column-wise view for `reward(prompts, completions, **columns)`: answer + extra columns."""
    columns: dict[str, list[Any]] = {"answer": [p.answer for p in problems]}
    for name in sorted({k for p in problems for k in p.columns}):
        columns[name] = [p.columns.get(name) for p in problems]
    return columns


def render_prompt(template: str, problem: Problem) -> str:
    """What the policy sees: `template` with {prompt} and the problem's columns filled in.

    The gold answer is deliberately not available to the template.
    """
    try:
        return template.format(prompt=problem.prompt, **problem.columns)
    except (KeyError, IndexError) as err:
        have = ", ".join(["prompt", *sorted(problem.columns)])
        raise ValueError(
            f"prompt_template uses {{{err.args[0]}}}, which this task does not provide; "
            f"available: {have}"
        ) from None
    except (AttributeError, TypeError, ValueError) as err:  # {prompt.x}, {prompt:d}, a lone {
        raise ValueError(
            f"prompt_template {template!r} cannot be filled in ({err}); write fields as "
            "{prompt} or {column}, with doubled braces {{ }} for literal ones"
        ) from None


def generated_splits(
    draw: Callable[[int, int], list[Problem]],
    seed: int,
    eval_seed: int,
    sizes: tuple[int, int],
    what: str,
    fix: str,
) -> tuple[list[Problem], list[Problem]]:
    """(training, held-out) problems of a source that makes them from a seed (a generator, an
    environment): `draw(seed, n)` gives n. The held-out split is `eval_size` draws from the
    fixed `eval_seed`, distinct by key; the training split is `train_size` draws from the
    run's seed without any held-out key. A source that repeats itself too much to make the
    held-out split, or leaves nothing to train on, is one line with `fix`."""
    train_size, eval_size = sizes
    held: list[Problem] = []
    seen: set[str] = set()
    for problem in draw(eval_seed, eval_size):
        if problem.key not in seen:
            seen.add(problem.key)
            held.append(problem)
    if len(held) < eval_size // 2:
        raise AscentError(
            f"{what} gave only {len(held)} distinct problems in {eval_size} draws; {fix}"
        )
    train = [p for p in draw(seed, train_size) if p.key not in seen]
    if not train:
        raise AscentError(f"every {what} training problem is also a held-out one; {fix}")
    return train, held
