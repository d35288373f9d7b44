"""What crosses from the controller to the actor and critic: a scored batch ready for the
loss (`TrainBatch`), and the running means of the metrics their updates report."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from ascent.rollout import RolloutBatch
from ascent.train.distributed import Dist


@dataclass(frozen=True)
class TrainBatch:
    """A scored rollout batch, ready for the loss. Shapes (B, R) as in `RolloutBatch`."""

    rollout: RolloutBatch
    advantages: Tensor  # (B, R) A_t, 0 off the response mask
    # (B, R) log-probs of the policy that sampled the batch; None when the batch feeds a
    # single optimiser step, where that policy IS the one being updated (ratio = 1).
    old_logp: Tensor | None
    ref_logp: Tensor | None  # (B, R) reference-policy log-probs, when KL is a loss term
    # (B, R) log-probs of an OLDER policy that actually generated the rows (asynchronous
    # rollouts, replayed rows); with it, old_logp anchors the clip and is_cap truncates the
    # importance weight pi_old / pi_behaviour (decoupled PPO). None for on-policy batches.
    behaviour_logp: Tensor | None = None
    returns: Tensor | None = None  # (B, R) critic regression targets (value-based estimators)
    old_values: Tensor | None = None  # (B, R) V(s_t) at sampling time (the value clip's anchor)
    positive: Tensor | None = None  # (B,) bool: the row was judged correct (NLL term)

    def __len__(self) -> int:
        return len(self.rollout)

    def select(self, rows: Tensor) -> TrainBatch:
        """The batch restricted to `rows` (a long index tensor)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        picked = {k: None if v is None else v[rows] for k, v in values.items() if k != "rollout"}
        return TrainBatch(rollout=self.rollout.select(rows), **picked)

    def narrow(self, width: int) -> TrainBatch:
        """The batch with response columns cut to the first `width`."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        cut = {
            k: v[:, :width] if v is not None and v.dim() == 2 else v
            for k, v in values.items()
            if k != "rollout"
        }
        return TrainBatch(rollout=self.rollout.narrow(width), **cut)

    def trimmed(self) -> TrainBatch:
        """The batch cut to its own longest response (up to its last chosen token) and its
        longest prompt (left-padding columns no row uses dropped)."""
        narrowed = self.narrow(self.rollout.response_width)
        return replace(narrowed, rollout=narrowed.rollout.trim_prompt())

    def to_tensors(self) -> dict[str, Tensor]:
        """Every tensor under a flat name (e.g. to save it with safetensors)."""
        out = {f"rollout.{f.name}": getattr(self.rollout, f.name) for f in fields(self.rollout)}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                out[f.name] = value
        return {k: v.contiguous() for k, v in out.items()}

    @classmethod
    def from_tensors(cls, tensors: dict[str, Tensor]) -> TrainBatch:
        """The batch `to_tensors` flattened (absent optional fields are None)."""
        prefix = "rollout."
        rollout = RolloutBatch(
            **{k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        )
        rest = {k: v for k, v in tensors.items() if not k.startswith(prefix)}
        rest.setdefault("old_logp", None)
        rest.setdefault("ref_logp", None)
        return cls(rollout=rollout, **rest)

    def blank(self) -> TrainBatch:
        """Its first row with nothing to learn from (mask and advantages 0): a micro-batch a
        rank runs only so that its collectives meet the other ranks'."""
        row = self.select(torch.zeros(1, dtype=torch.long, device=self.advantages.device))
        rollout = replace(row.rollout, response_mask=torch.zeros_like(row.rollout.response_mask))
        return replace(row, rollout=rollout, advantages=torch.zeros_like(row.advantages))


class MetricMeans:
    """Token-weighted means of per-micro-batch metrics, plain means of per-update ones."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = defaultdict(float)
        self.weights: dict[str, float] = defaultdict(float)

    def add(self, metrics: dict[str, Tensor | float], weight: float = 1.0) -> None:
        for key, value in metrics.items():
            self.sums[key] += float(value) * weight
            self.weights[key] += weight

    def means(self, dist: Dist | None = None) -> dict[str, float]:
        """The means; over every rank's additions when `dist` spans several ranks."""
        sums, weights = dict(self.sums), dict(self.weights)
        if dist is not None and dist.distributed:
            sums, weights = defaultdict(float), defaultdict(float)
            for rank_sums, rank_weights in dist.gather((dict(self.sums), dict(self.weights))):
                for key, value in rank_sums.items():
                    sums[key] += value
                    weights[key] += rank_weights[key]
        return {k: sums[k] / weights[k] for k in sorted(sums) if weights[k] > 0}
