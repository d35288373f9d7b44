"""reasoning-gym's scorers as a reward: each generated problem is scored by its own dataset.

A reasoning-gym problem (`[data] path = "reasoning_gym:NAME"`) carries two columns, `rg_spec`
(the generator's name and every argument it was built with, as JSON) and `rg_index` (the
problem's position in it). The reward rebuilds that generator, takes the exact entry the
problem came from and asks the library's own `score_answer` about the completion's answer, so
a score here is the score reasoning-gym itself gives, partial credit included. Columns stay
plain JSON (a checkpoint's replay buffer keeps them), and nothing of the entry is re-encoded:
an entry's metadata can hold tuples and sets that JSON would change.

The answer is taken as reasoning-gym's own evaluations take it: the last
`<answer>...</answer>` of the completion (`answer_format = "tag"`); or the whole completion
(`"text"`, for a model prompted to reply with the answer alone); or its last number
(`"last_number"`, for numeric answers stated in a sentence, "47 + 77 = 124").
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError
from ascent.rewards.base import REWARDS, Scored, ScoredReward, column, completion_text

PREFIX = "reasoning_gym:"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
EXTRA_HINT = "pip install 'ascent[envs]' (or scripts/setup.sh --dev)"


def import_reasoning_gym() -> Any:
    """The reasoning_gym package, or one line naming the extra that installs it."""
    try:
        import reasoning_gym
    except ImportError:
        raise AscentError(
            f"reasoning-gym generators need the reasoning-gym package; {EXTRA_HINT}"
        ) from None
    return reasoning_gym


def dataset_spec(name: str, options: dict[str, Any], seed: int, size: int) -> str:
    """The JSON that names one generated dataset: what `build_dataset` rebuilds it from."""
    return json.dumps(
        {"name": name, "options": options, "seed": seed, "size": size}, sort_keys=True
    )


@lru_cache(maxsize=64)
def build_dataset(spec: str) -> Any:
    """The reasoning-gym dataset `spec` names (built once per process: entries are drawn
    from it by index, each as the generator made it)."""
    fields = json.loads(spec)
    rg = import_reasoning_gym()
    try:
        return rg.create_dataset(
            fields["name"], seed=fields["seed"], size=fields["size"], **fields["options"]
        )
    except Exception as err:  # the config's own validate() asserts; others raise what they meet
        raise AscentError(
            f"reasoning_gym:{fields['name']} refused its settings "
            f"{fields['options']}: {err or type(err).__name__}"
        ) from None


def extract_tagged(text: str) -> str | None:
    """The last <answer>...</answer> of `text`, stripped, as reasoning-gym's evaluations take it."""
    from reasoning_gym.utils import extract_answer

    return extract_answer(text, tag_name="answer")


class ReasoningGymReward(ScoredReward):
    """`f(prompts, completions, rg_spec, rg_index, **columns)`: the library's score in [0, 1];
    `correct` means full marks."""

    def __init__(self, answer_format: str) -> None:
        import_reasoning_gym()
        self.answer_format = answer_format

    def _answer(self, text: str) -> str | None:
        if self.answer_format == "tag":
            return extract_tagged(text)
        if self.answer_format == "last_number":
            numbers = _NUMBER.findall(text)
            return numbers[-1] if numbers else None
        return text.strip()

    def score(self, prompts: list[Any], completions: list[Any], **columns: list[Any]) -> Scored:
        n = len(completions)
        specs = column(columns, "rg_spec", n, "reasoning_gym")
        indices = column(columns, "rg_index", n, "reasoning_gym")
        values: list[float | None] = []
        details: list[dict[str, Any]] = []
        entries: dict[tuple[str, int], dict[str, Any]] = {}  # a group's rows share one entry
        for completion, spec, index in zip(completions, specs, indices, strict=True):
            if spec is None:  # a problem of another [[data.sources]] source: not ours to score
                values.append(None)
                details.append({})
                continue
            dataset = build_dataset(spec)
            key = (spec, int(index))
            if key not in entries:  # an entry is generated afresh each time it is indexed
                entries[key] = dataset[key[1]]
            entry = entries[key]
            answer = self._answer(completion_text(completion))
            try:
                value = float(dataset.score_answer(answer, entry))
                outcome = "scored" if answer is not None else "no_answer"
            except Exception:  # a scorer that chokes on a strange answer: no credit
                value, outcome = 0.0, "scorer_error"
            values.append(value)
            details.append(
                {"extracted": answer, "outcome": outcome, "score": value, "correct": value >= 1.0}
            )
        return Scored(values, details)


@REWARDS.register("reasoning_gym", columns=("rg_spec", "rg_index"))
def build_reasoning_gym_reward(
    reward_cfg: RewardSection, sandbox_cfg: SandboxSection
) -> ReasoningGymReward:
    return ReasoningGymReward(reward_cfg.reasoning_gym.answer_format)
