"""Rollouts: the typed batch, sampling controls, and the engines that produce completions."""

from ascent.rollout.batch import RolloutBatch
from ascent.rollout.engine import ENGINES, RolloutEngine
from ascent.rollout.sampling import SamplingParams, sample_next
from ascent.rollout.transformers_engine import TransformersEngine, left_pad

__all__ = [
    "ENGINES",
    "RolloutBatch",
    "RolloutEngine",
    "SamplingParams",
    "TransformersEngine",
    "left_pad",
    "sample_next",
]
