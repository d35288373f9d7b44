"""One RL step, in the order data flows: prompts -> rollouts -> rewards -> advantages ->
update -> metrics.

Metric names follow TRL where TRL has one (reward, reward_std, frac_reward_zero_std, kl,
entropy, clip_ratio, completions/mean_length, ...), so a TRL user reads them as before:

    reward                     mean total reward of the batch
    reward/<name>              mean of each reward function (rows where it applies)
    reward_std                 mean over groups of the within-group reward std
    frac_reward_zero_std       fraction of groups whose rewards are all equal (no signal)
    adv_std                    std of the per-completion advantages
    kl                         KL to the reference policy (only when kl_coef > 0)
    entropy                    mean next-token entropy on the sampled tokens
    clip_ratio                 fraction of tokens where the PPO clip was active
    completions/mean_length    mean response length in tokens (also min, max)
    completions/clipped_ratio  fraction of responses cut by max_new_tokens
    loss, grad_norm, lr        per optimiser step, averaged over the step's updates
    tokens_per_s               response tokens per second of the whole step
    time/rollout, time/reward, time/update   seconds spent in each stage
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ascent.algos import AdvantageBatch, kl_penalty_rewards, masked_mean
from ascent.data import Problem, reward_columns
from ascent.models.forward import response_logprobs
from ascent.rewards import RewardOutput
from ascent.rollout import RolloutBatch
from ascent.train.llm_setup import LLMRun, updates_per_step
from ascent.train.llm_update import TrainBatch, update_policy


@dataclass(frozen=True)
class Scored:
    """A rollout batch with its text and rewards."""

    rollout: RolloutBatch
    problems: list[Problem]  # one per row, found through the row's group id
    completions: list[str]
    rewards: RewardOutput  # total[i] is None when no reward function applies to row i

    def subset(self, rows: list[int]) -> Scored:
        r = self.rewards
        return Scored(
            self.rollout.select(
                torch.as_tensor(rows, dtype=torch.long, device=self.rollout.group_ids.device)
            ),
            [self.problems[i] for i in rows],
            [self.completions[i] for i in rows],
            RewardOutput(
                [r.total[i] for i in rows],
                {name: [values[i] for i in rows] for name, values in r.components.items()},
                [r.details[i] for i in rows],
            ),
        )


def trainable(scored: Scored, needs_groups: bool) -> Scored:
    """The rows that can be learned from: those with a reward (a row no reward function
    applies to is left out, not trained on as 0) and, for group-normalised estimators, whose
    group still has another row to compare with."""
    rows = [i for i, total in enumerate(scored.rewards.total) if total is not None]
    if needs_groups:
        ids = [int(g) for g in scored.rollout.group_ids[rows].tolist()] if rows else []
        rows = [i for i, g in zip(rows, ids, strict=True) if ids.count(g) >= 2]
    return scored if len(rows) == len(scored.completions) else scored.subset(rows)


def collect(run: LLMRun) -> tuple[RolloutBatch, list[Problem]]:
    """Sample group_size completions for each of the step's prompts."""
    drawn = run.sampler.draw(run.prompts_per_step)
    prompts = run.encode([run.prompt_text(d.problem) for d in drawn])
    rollout = run.engine.generate(
        prompts, [d.uid for d in drawn], run.cfg.rollout.group_size, run.sampling, run.generator
    )
    by_uid = {d.uid: d.problem for d in drawn}
    return rollout, [by_uid[g] for g in rollout.group_ids.tolist()]


def score(run: LLMRun, rollout: RolloutBatch, problems: list[Problem]) -> Scored:
    completions = run.tokenizer.batch_decode(rollout.response_ids, skip_special_tokens=True)
    prompts = [run.prompt_text(p) for p in problems]
    rewards = run.reward(prompts, completions, **reward_columns(problems))
    return Scored(rollout, problems, completions, rewards)


def outcome_rewards(total: Tensor, mask: Tensor) -> Tensor:
    """(B, R) token rewards: each completion's reward on its last policy token, 0 elsewhere."""
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = (positions * mask.long()).argmax(-1, keepdim=True)
    rewards = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    return rewards.scatter(-1, last, total[:, None].to(torch.float32))


@torch.no_grad()
def policy_logprobs(model: torch.nn.Module, run: LLMRun, rollout: RolloutBatch) -> Tensor:
    """(B, R) log-probs of the batch under `model`, in micro-batches, without gradients."""
    size = run.cfg.train.micro_batch_size
    parts = [
        response_logprobs(model, rollout.select(slice(i, i + size)), run.parts.temperature)[0]
        for i in range(0, len(rollout), size)
    ]
    return torch.cat(parts)


def make_train_batch(run: LLMRun, scored: Scored) -> tuple[TrainBatch, dict[str, float]]:
    """Advantages (with the optional KL reward penalty) and the log-probs the loss needs.

    The sampling policy's log-probs come from the engine when they are exactly the policy's
    (`exact_logprobs`), else from one forward pass, and are only needed when the batch feeds
    more than one optimiser step or KL is a reward penalty. The reference model, when there
    is one, runs once per batch.
    """
    rollout, parts = scored.rollout, run.parts
    mask = rollout.response_mask
    total = torch.tensor(scored.rewards.total, dtype=torch.float32, device=mask.device)
    rewards = outcome_rewards(total, mask)
    metrics: dict[str, float] = {}
    needs_old = updates_per_step(run.cfg) > 1 or (parts.kl is not None and not parts.kl_in_loss)
    old_logp = None  # one update: the policy being updated is the sampling policy, ratio = 1
    if needs_old:
        exact = run.engine.exact_logprobs
        old_logp = rollout.logprobs if exact else policy_logprobs(run.policy, run, rollout)
    ref_logp = None if parts.kl is None else policy_logprobs(run.reference, run, rollout)
    if ref_logp is not None and not parts.kl_in_loss:
        kl = parts.kl(old_logp, ref_logp)
        rewards = kl_penalty_rewards(rewards, kl, parts.kl_coef, mask)
        metrics["kl"] = float(masked_mean(kl, mask))
        ref_logp = None
    if updates_per_step(run.cfg) == 1:
        old_logp = None
    result = parts.advantage(
        AdvantageBatch(rewards=rewards, mask=mask, group_ids=rollout.group_ids),
        parts.advantage_params,
    )
    per_row = masked_mean(result.advantages, mask, dim=-1)
    metrics["adv_std"] = float(per_row.std()) if len(per_row) > 1 else 0.0
    return TrainBatch(rollout, result.advantages, old_logp, ref_logp), metrics


def reward_metrics(scored: Scored) -> dict[str, float]:
    """Reward and length statistics of the whole batch (rows without a reward excluded)."""
    rollout = scored.rollout
    lengths = rollout.response_lengths.float()
    metrics = {
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float((~rollout.finished).float().mean()),
        "frac_unscored": sum(t is None for t in scored.rewards.total) / len(lengths),
    }
    groups: dict[int, list[float]] = {}
    for g, total in zip(rollout.group_ids.tolist(), scored.rewards.total, strict=True):
        if total is not None:
            groups.setdefault(int(g), []).append(total)
    if groups:
        values = [v for vs in groups.values() for v in vs]
        stds = [torch.tensor(vs, dtype=torch.float64).std().item() for vs in groups.values()]
        stds = [0.0 if v != v else v for v in stds]  # a group of one has no spread
        metrics["reward"] = sum(values) / len(values)
        metrics["reward_std"] = sum(stds) / len(stds)
        metrics["frac_reward_zero_std"] = sum(v < 1e-8 for v in stds) / len(stds)
    for name, values in scored.rewards.components.items():
        present = [v for v in values if v is not None]
        if present:
            metrics[f"reward/{name}"] = sum(present) / len(present)
    return metrics


def rl_step(run: LLMRun, step: int) -> tuple[dict[str, float], Scored]:
    """Run one step; return its metrics and the scored batch (for sample dumps)."""
    t0 = time.perf_counter()
    rollout, problems = collect(run)
    t1 = time.perf_counter()
    scored = score(run, rollout, problems)
    t2 = time.perf_counter()
    metrics = reward_metrics(scored)
    usable = trainable(scored, run.parts.needs_groups)
    if len(usable.completions):
        batch, batch_metrics = make_train_batch(run, usable)
        metrics.update(batch_metrics)
        metrics.update(update_policy(run, batch, step))
    else:  # nothing to learn from: no update (the schedule does not advance either)
        metrics["update_skipped"] = 1.0
    t3 = time.perf_counter()
    metrics.update(
        {
            "tokens_per_s": rollout.num_tokens / (t3 - t0),
            "time/rollout": t1 - t0,
            "time/reward": t2 - t1,
            "time/update": t3 - t2,
        }
    )
    return metrics, scored


def sample_rows(scored: Scored, step: int, limit: int) -> list[dict[str, Any]]:
    """The first `limit` completions of a step, for `samples/step-N.jsonl`."""
    rows = []
    for i in range(min(limit, len(scored.completions))):
        rows.append(
            {
                "step": step,
                "group": int(scored.rollout.group_ids[i]),
                "prompt": scored.problems[i].prompt,  # the task's prompt, before the template
                "completion": scored.completions[i],
                "answer": scored.problems[i].answer,
                "reward": scored.rewards.total[i],
                "details": scored.rewards.details[i],
            }
        )
    return rows
