"""SRPO History Resampling: a per-prompt record of rollout outcomes, and the epoch-end filter.

Zhang et al. 2025, "SRPO: A Cross-Domain Implementation of Large-Scale Reasoning
Reinforcement Learning", https://arxiv.org/abs/2504.14286, section 3.2: at the end of each
epoch, prompts whose rollouts were ALL correct are dropped from later epochs (they only give
zero-variance groups, hence zero advantages); prompts with mixed outcomes are kept, and so are
all-wrong ones, which may become solvable as the policy improves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class ResampleReport:
    """What one epoch-end resampling did."""

    epoch: int  # the epoch that ended
    seen: int  # prompts drawn in that epoch
    kept: int  # prompts of the pool kept for the next epoch
    dropped: int  # prompts dropped: all rollouts correct
    zero_std_before: float  # fraction of the seen prompts whose rewards were all equal
    zero_std_after: float  # the same fraction among the seen prompts that were kept
    kept_pool: bool = False  # True when dropping would have left too few prompts for a step

    def metrics(self) -> dict[str, float]:
        return {f"resample/{k}": float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_metrics(cls, metrics: Mapping[str, float]) -> ResampleReport | None:
        """The report logged in a step's metrics, if that step ended an epoch."""
        if "resample/epoch" not in metrics:
            return None
        kinds = {"zero_std_before": float, "zero_std_after": float, "kept_pool": bool}
        return cls(
            **{f.name: kinds.get(f.name, int)(metrics[f"resample/{f.name}"]) for f in fields(cls)}
        )

    def line(self) -> str:
        note = " (too few would remain: pool kept whole)" if self.kept_pool else ""
        return (
            f"history resampling after epoch {self.epoch}: {self.seen} prompts seen, "
            f"{self.dropped} dropped (all correct), {self.kept} kept{note}; zero-variance "
            f"groups {self.zero_std_before:.0%} -> {self.zero_std_after:.0%}"
        )


@dataclass
class RewardHistory:
    """Rewards and correctness of every rollout, per prompt (by its index in the problem list)."""

    rewards: dict[int, list[float]] = field(default_factory=dict)  # all epochs
    epoch_rewards: dict[int, list[float]] = field(default_factory=dict)  # this epoch
    epoch_correct: dict[int, list[bool]] = field(default_factory=dict)  # this epoch

    def record(self, index: int, rewards: list[float], correct: list[bool]) -> None:
        """One group of rollouts of prompt `index` (a prompt may come back within an epoch)."""
        self.rewards.setdefault(index, []).extend(rewards)
        self.epoch_rewards.setdefault(index, []).extend(rewards)
        self.epoch_correct.setdefault(index, []).extend(correct)

    def end_epoch(
        self, epoch: int, pool: list[int], min_pool: int
    ) -> tuple[list[int], ResampleReport]:
        """The next epoch's pool: `pool` minus this epoch's all-correct prompts.

        Prompts of the pool not drawn this epoch are kept. If fewer than `min_pool` prompts
        would remain, the pool is kept whole (and the report says so).
        """
        seen = [i for i in pool if self.epoch_correct.get(i)]
        dropped = {i for i in seen if all(self.epoch_correct[i])}
        flat = {i for i in seen if len(set(self.epoch_rewards[i])) == 1}
        kept = [i for i in pool if i not in dropped]
        kept_pool = len(kept) < min_pool
        if kept_pool:
            kept, dropped = list(pool), set()
        kept_seen = [i for i in seen if i not in dropped]
        report = ResampleReport(
            epoch=epoch,
            seen=len(seen),
            kept=len(kept),
            dropped=len(dropped),
            zero_std_before=len(flat) / len(seen) if seen else 0.0,
            zero_std_after=len(flat & set(kept_seen)) / len(kept_seen) if kept_seen else 0.0,
            kept_pool=kept_pool,
        )
        self.epoch_rewards, self.epoch_correct = {}, {}
        return kept, report

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("rewards", "epoch_rewards", "epoch_correct"):
            setattr(self, name, {int(k): list(v) for k, v in state[name].items()})
