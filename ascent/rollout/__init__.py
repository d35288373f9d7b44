"""Rollouts: the typed batch, sampling controls, and the engines that produce completions."""

from ascent.rollout.batch import RolloutBatch
from ascent.rollout.engine import ENGINES, EngineContext, RolloutEngine
from ascent.rollout.sampling import SamplingParams, sample_next
from ascent.rollout.transformers_engine import TransformersEngine, left_pad
from ascent.rollout.vllm_engine import VLLMEngine
from ascent.rollout.vllm_modes import build_vllm  # registers the `vllm` engine

__all__ = [
    "ENGINES",
    "EngineContext",
    "RolloutBatch",
    "RolloutEngine",
    "SamplingParams",
    "TransformersEngine",
    "VLLMEngine",
    "build_vllm",
    "left_pad",
    "sample_next",
]
