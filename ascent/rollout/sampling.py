"""Choosing the next token: temperature, top-k, top-p, greedy; and its log-probability."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ascent.config.llm_sections import RolloutSection
from ascent.rollout.native import decode_kernels


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # logits are divided by it; log-probs refer to the scaled policy
    top_k: int = 0  # keep the k likeliest tokens (0: off)
    top_p: float = 1.0  # keep the smallest set with this much probability (1.0: off)
    greedy: bool = False  # argmax instead of sampling (evaluation)
    stop: tuple[str, ...] = ()  # a row ends once its text holds one of these (kept in it)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0 or not 0 < self.top_p <= 1:
            raise ValueError(f"need top_k >= 0 and 0 < top_p <= 1, got {self.top_k}, {self.top_p}")

    @classmethod
    def from_config(cls, cfg: RolloutSection) -> SamplingParams:
        return cls(cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p, stop=tuple(cfg.stop))


def draw_seeds(count: int, generator: torch.Generator | None, high: int = 2**31 - 1) -> list[int]:
    """`count` seeds for engines that take integers (vLLM, Ray replicas), drawn from the
    run's generator on that generator's own device (a CUDA generator cannot draw on the CPU)."""
    device = generator.device if generator is not None else None
    return torch.randint(0, high, (count,), generator=generator, device=device).tolist()


def truncate_logits(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """Logits with everything outside the top-k / top-p set at -inf (the argmax always stays)."""
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop a token when the tokens strictly likelier than it already reach top_p.
        drop_sorted = (probs.cumsum(-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next(
    logits: Tensor, params: SamplingParams, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """Pick one token per row and return it with its log-probability.

    Args:
        logits: (B, V) next-token logits.
        params: sampling controls.
        generator: the random stream to draw from (None: torch's global one).

    Returns:
        tokens (B,) long, and logprobs (B,) float32 = log_softmax(logits / temperature) at
        the token: the log-probability under the policy the trainer optimises, which is the
        untruncated one (top-k / top-p only restrict what is drawn).

    bf16 logits on a CPU without top-k / top-p are drawn by ascent's C sampler where it is
    built (`native.py`): the same inverse-CDF draw from the same uniform numbers in three
    passes over the bf16 row instead of a float32 copy and five (3.1 -> 1.3 ms at 128 rows
    and a 49k vocabulary).
    """
    if logits.dtype == torch.bfloat16 and logits.device.type == "cpu":
        kernels = None if params.top_k or params.top_p < 1.0 else decode_kernels()
        if kernels is not None:  # the same draw (one uniform number a row), in C
            u = None if params.greedy else torch.rand(len(logits), generator=generator)
            return kernels.sample(logits, params.temperature, u)
    scaled = logits.float()  # a copy when the logits are not float32 already
    owned = scaled.data_ptr() != logits.data_ptr()
    if params.temperature != 1.0:
        scaled = scaled.div_(params.temperature) if owned else scaled / params.temperature
        owned = True
    top = scaled.amax(-1, keepdim=True)
    truncated = None
    if params.greedy:
        tokens = scaled.argmax(-1)
    elif params.top_k or params.top_p < 1.0:
        truncated = torch.softmax(truncate_logits(scaled, params.top_k, params.top_p), -1)
    # Unnormalised probabilities, the largest 1: in place over a copy of our own. Each fresh
    # (B, V) tensor is 25 MB at 128 rows and a 49k vocabulary, a memory pass and page faults
    # of its own: SmolLM2's 128 rows took 17.5 ms a step to sample with three, 4.3 with one.
    weights = (scaled.sub_(top) if owned else scaled - top).exp_()
    log_norm = top + weights.sum(-1, keepdim=True).log()  # log-sum-exp of the scaled logits
    if not params.greedy:
        tokens = inverse_cdf(weights if truncated is None else truncated, generator)
    # The drawn tokens' scaled logits, from the logits (the copy now holds the weights):
    # the same float32 division as above, so the same values.
    picked = logits.gather(-1, tokens[:, None]).float()
    if params.temperature != 1.0:
        picked = picked / params.temperature
    return tokens, (picked - log_norm).squeeze(-1)


BLOCK = 256  # inverse_cdf's block width


def inverse_cdf(weights: Tensor, generator: torch.Generator | None) -> Tensor:
    """One draw per row of (B, V) non-negative weights, with probability proportional to
    them: the first token whose cumulative weight exceeds a uniform draw.

    One random number per row, where the Gumbel or exponential race needs one per vocabulary
    entry (measured with a 49k vocabulary and 128 rows: 106 ms a step for the race's random
    numbers alone). The cumulative sum, a slow sequential scan over the whole vocabulary, is
    taken over blocks of BLOCK tokens, then inside the one block the draw falls in.
    """
    b, v = weights.shape
    pad = (-v) % BLOCK  # (a copy only when the vocabulary is not a multiple of BLOCK)
    blocks = (F.pad(weights, (0, pad)) if pad else weights).view(b, -1, BLOCK)
    block_cdf = blocks.sum(-1).cumsum(-1)  # (B, V / BLOCK)
    u = torch.rand(b, 1, generator=generator, device=weights.device) * block_cdf[:, -1:]
    block = torch.searchsorted(block_cdf, u, right=True).clamp_max(block_cdf.shape[1] - 1)
    before = torch.where(block > 0, block_cdf.gather(-1, (block - 1).clamp_min(0)), 0.0)
    inside = blocks[torch.arange(b, device=weights.device), block.squeeze(-1)].cumsum(-1)
    # Inside the block, below its total (rounding must not step past its last token).
    target = (u - before).clamp_min(0.0).minimum(inside[:, -1:] * (1 - 1e-6))
    offset = torch.searchsorted(inside, target, right=True)
    return (block * BLOCK + offset).squeeze(-1).clamp_max(v - 1)
