"""Problems from a verifiers environment: `[data] path = "verifiers:ENV_ID"`.

A verifiers environment (prime-rl's format) holds its problems as rows of a dataset, each
with a chat `prompt` the environment formatted (its system prompt and few-shot turns, then
the question), an `answer` and an `info` dict. A problem here is one row: its prompt is the
last user message's text, its key that text too, and the messages before it travel in the
`chat_context` column, so the policy reads the conversation the environment wrote (through
the chat template when `[data] chat_template` uses one; as plain lines before the question
otherwise). Its columns are the row's and its info's scalar fields (usable in
`prompt_template`) plus `vf_spec` and `vf_index`, from which the `verifiers` reward finds the
row again to score a completion with the environment's rubric.

The held-out problems are `eval_size` rows of the environment's eval dataset, drawn with a
fixed seed (of its train dataset when it has none, as verifiers evaluates then); training
problems are the train dataset's other rows in the run's seeded order, `train_size` of them
when set, none sharing a held-out prompt. `[data] verifiers` holds load_environment's
arguments.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ascent.config.data import ProblemSource
from ascent.data.problems import CHAT_CONTEXT, Problem, held_out_split
from ascent.errors import AscentError
from ascent.rewards.verifiers import (
    RESERVED,
    env_spec,
    environment,
    has_eval_split,
    row_answer,
    split_rows,
)


def _message(message: Any) -> dict[str, str]:
    """A chat message as a plain dict of text (verifiers may hand pydantic messages, and a
    content may be a list of parts, of which ascent's policies read the text ones)."""
    get = message.get if isinstance(message, dict) else lambda k, d=None: getattr(message, k, d)
    content = get("content", "") or ""
    if isinstance(content, list):
        texts = [part.get("text") if isinstance(part, dict) else None for part in content]
        content = " ".join(t for t in texts if isinstance(t, str))
    return {"role": str(get("role", "")), "content": str(content)}


def _problem(row: dict[str, Any], spec: str, index: int, where: str) -> Problem:
    prompt = row.get("prompt")
    columns: dict[str, Any] = {}
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list) and prompt:
        messages = [_message(m) for m in prompt]
        if messages[-1]["role"] != "user":
            raise AscentError(
                f"{where}: row {index}'s prompt ends with a {messages[-1]['role']} message; "
                "ascent poses a problem as the conversation's last user message"
            )
        text = messages[-1]["content"]
        if len(messages) > 1:
            columns[CHAT_CONTEXT] = messages[:-1]
    else:
        raise AscentError(f"{where}: row {index} has no prompt (a string or a list of messages)")
    info = row.get("info")
    if isinstance(info, str):  # verifiers allows info as JSON text
        try:
            info = json.loads(info)
        except json.JSONDecodeError:
            info = None
    for fields in (row, info if isinstance(info, dict) else {}):
        columns.update(
            (key, value)
            for key, value in fields.items()
            if key not in RESERVED and isinstance(value, (str, int, float, bool))
        )
    columns.update(vf_spec=spec, vf_index=index)
    return Problem(key=text, prompt=text, answer=row_answer(row), columns=columns)


def _problems(spec: str, where: str) -> list[Problem]:
    rows = split_rows(spec)
    return [_problem(rows[i], spec, i, where) for i in range(len(rows))]


def _warn_about_sampling(spec: str, where: str) -> None:
    """An environment may say how it wants to be sampled (verifiers passes that to its
    client); ascent samples with [rollout], so say which of its wishes go unheard."""
    wishes = dict(getattr(environment(spec), "sampling_args", None) or {})
    wishes.pop("n", None)
    if not wishes.get("extra_body"):
        wishes.pop("extra_body", None)
    if wishes:
        listed = ", ".join(f"{k}={v!r}" for k, v in sorted(wishes.items()))
        print(
            f"warning: {where} asks to be sampled with {listed}; ascent samples with [rollout] "
            "(temperature, top_p, max_new_tokens, stop): set them there",
            file=sys.stderr,
        )


def load_verifiers(
    cfg: ProblemSource, seed: int, eval_seed: int
) -> tuple[list[Problem], list[Problem]]:
    """(training problems, held-out problems) of the environment `cfg.path` names."""
    env_id = cfg.verifiers_env
    assert env_id, "load_verifiers needs a verifiers:ENV_ID path"
    where = f"verifiers:{env_id}"
    args = dict(cfg.verifiers)
    train_spec = env_spec(env_id, args, "train", os.getcwd())
    rows = _problems(train_spec, where)
    _warn_about_sampling(train_spec, where)
    held_rows = None
    if has_eval_split(train_spec):
        held_rows = _problems(env_spec(env_id, args, "eval", os.getcwd()), where)
    elif len(rows) <= cfg.eval_size:
        raise AscentError(
            f"{where} has {len(rows)} problems and no eval dataset, and holding out eval_size "
            f"= {cfg.eval_size} leaves none to train on; lower eval_size"
        )
    train, held = held_out_split(rows, held_rows, cfg.eval_size, seed, eval_seed)
    if not train:
        raise AscentError(f"every {where} training problem is also a held-out one")
    return train[: cfg.train_size or len(train)], held
