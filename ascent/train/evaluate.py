"""Held-out evaluation: greedy completions of the held-out problems, scored by the run's reward.

A completion counts as correct when every reward function that judges correctness (math,
countdown, code: their detail dict has a `correct` flag) says so. Accuracy is None when no
reward function judges correctness (a custom reward); the mean reward is always reported.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.config.llm_sections import RolloutSection
from ascent.data import Problem, PromptFormatter, reward_columns
from ascent.observe.text_metrics import text_metrics
from ascent.rewards import CompositeReward, is_correct
from ascent.rollout import RolloutEngine, SamplingParams
from ascent.train.llm_rollout import Rollouts

EVAL_CHUNK = 256  # prompts decoded at once


@dataclass(frozen=True)
class EvalResult:
    accuracy: float | None  # fraction of problems solved, in [0, 1]
    reward: float  # mean total reward over the problems some reward function applies to
    samples: list[dict[str, Any]] = field(default_factory=list, repr=False)
    text: dict[str, float] = field(default_factory=dict)  # reflection / code-block rates
    by_source: dict[str, float] = field(default_factory=dict)  # [[data.sources]]: accuracy each

    def metrics(self) -> dict[str, float]:
        out = {"eval/reward": self.reward, **{f"eval/{k}": v for k, v in self.text.items()}}
        if self.accuracy is not None:
            out["eval/accuracy"] = self.accuracy
        out.update({f"eval/{name}/accuracy": v for name, v in self.by_source.items()})
        return out


@torch.no_grad()
def evaluate(
    engine: RolloutEngine,
    tokenizer: PreTrainedTokenizerBase,
    reward: CompositeReward,
    problems: list[Problem],
    max_new_tokens: int,
    template: str = "{prompt}",
    stop: Sequence[str] = (),
    formatter: PromptFormatter | None = None,
    calls: int = 0,
    filler: Problem | None = None,
) -> EvalResult:
    """Greedy-decode every problem once and score it; the policy sees each prompt as
    `formatter` makes it (default: `template` filled in, no chat template).

    `calls`: make at least this many generate calls, the extra ones on `filler` (discarded),
    so that every rank of a sharded policy enters the engine as often as the others.
    """
    formatter = formatter or PromptFormatter(template, tokenizer, chat=False)
    params = SamplingParams(max_new_tokens, greedy=True, stop=tuple(stop))
    prompts = [formatter.rendered(p) for p in problems]
    completions: list[str] = []
    for start in range(0, len(problems), EVAL_CHUNK):
        chunk = problems[start : start + EVAL_CHUNK]
        ids = formatter.encode(chunk)
        batch = engine.generate(ids, list(range(len(chunk))), 1, params)
        completions += tokenizer.batch_decode(batch.response_ids, skip_special_tokens=True)
    made = (len(problems) + EVAL_CHUNK - 1) // EVAL_CHUNK
    for _ in range(calls - made):
        engine.generate(formatter.encode([filler]), [0], 1, params)
    out = reward(prompts, completions, **reward_columns(problems)) if problems else None
    verdicts = [is_correct(d) for d in out.details] if out else []
    totals = out.total if out else []
    samples = [
        {
            "prompt": p.prompt,
            "completion": c,
            "answer": p.answer,
            "reward": r,
            "correct": v,
            "source": p.source,
        }
        for p, c, r, v in zip(problems, completions, totals, verdicts, strict=True)
    ]
    return summarize(samples)


def summarize(
    samples: list[dict[str, Any]], reflection: re.Pattern[str] | None = None
) -> EvalResult:
    """Accuracy over the judged samples (and per source, where they come from several), mean
    reward over the scored ones, text rates."""
    scored = [s["reward"] for s in samples if s["reward"] is not None]
    text = text_metrics([s["completion"] for s in samples], reflection)
    mean = sum(scored) / len(scored) if scored else float("nan")
    by_source: dict[str, float] = {}
    for name in dict.fromkeys(s.get("source", "") for s in samples):
        if name and (acc := _accuracy([s for s in samples if s.get("source") == name])) is not None:
            by_source[name] = acc
    return EvalResult(_accuracy(samples), mean, samples, text, by_source)


def _accuracy(samples: list[dict[str, Any]]) -> float | None:
    judged = [s["correct"] for s in samples if s["correct"] is not None]
    return sum(judged) / len(judged) if judged else None


def eval_policy(src: Rollouts, problems: list[Problem], rollout: RolloutSection) -> EvalResult:
    """`evaluate` on a run's held-out `problems` at its max_new_tokens, with its rollout side;
    on several ranks each evaluates every world_size-th problem and all get the whole result."""
    dist = src.dist
    mine = problems[dist.rank :: dist.world_size]
    result = evaluate(
        src.engine,
        src.tokenizer,
        src.reward,
        mine,
        rollout.max_new_tokens,
        stop=rollout.stop,
        formatter=src.formatter,
        calls=dist.all_max((len(mine) + EVAL_CHUNK - 1) // EVAL_CHUNK),
        filler=problems[0],
    )
    if not dist.distributed:
        return summarize(result.samples, src.reflection)
    parts = dist.gather(result.samples)
    samples = [parts[i % dist.world_size][i // dist.world_size] for i in range(len(problems))]
    return summarize(samples, src.reflection)
