"""The default rollout engine: batched sampling from a transformers model in this process.

It decodes with the very module the trainer updates (no weight sync), so its log-probs are
the policy's own. Each distinct prompt is prefilled once and its KV cache shared by its
`n` completions; decoding stops as soon as every row has produced EOS.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ascent.rollout.batch import RolloutBatch
from ascent.rollout.decoders import CacheDecoder, StaticLlamaDecoder
from ascent.rollout.engine import ENGINES
from ascent.rollout.sampling import SamplingParams, sample_next


def left_pad(
    prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[Tensor, Tensor]:
    """(N, P) ids and mask of token lists, left-padded to the longest."""
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, tokens in enumerate(prompts):
        ids[row, width - len(tokens) :] = torch.as_tensor(tokens, dtype=torch.long)
        mask[row, width - len(tokens) :] = 1
    return ids.to(device), mask.to(device)


@ENGINES.register("transformers")
class TransformersEngine:
    exact_logprobs = True

    def __init__(
        self, model: nn.Module, *, pad_id: int, eos_ids: Sequence[int], fast: bool = True
    ) -> None:
        self.model = model
        self.pad_id = pad_id
        self.eos_ids = torch.as_tensor(sorted(set(eos_ids)), dtype=torch.long)
        self.fast = fast and StaticLlamaDecoder.supports(model)

    def _decoder(self) -> StaticLlamaDecoder | CacheDecoder:
        return StaticLlamaDecoder(self.model) if self.fast else CacheDecoder(self.model)

    @torch.no_grad()
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        group_ids: Sequence[int],
        n: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        if len(group_ids) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(group_ids)} group ids")
        device = next(self.model.parameters()).device
        prompt_ids, prompt_mask = left_pad(prompts, self.pad_id, device)
        was_training = self.model.training
        self.model.eval()
        try:
            tokens, logprobs, finished = self._decode(prompt_ids, prompt_mask, n, params, generator)
        finally:
            self.model.train(was_training)
        produced = torch.cat([torch.ones_like(finished[:, :1]), ~finished[:, :-1]], dim=-1)
        return RolloutBatch(
            prompt_ids=prompt_ids.repeat_interleave(n, dim=0),
            prompt_mask=prompt_mask.repeat_interleave(n, dim=0),
            response_ids=tokens,
            response_mask=produced.float(),
            logprobs=torch.where(produced, logprobs, torch.zeros_like(logprobs)),
            group_ids=torch.as_tensor(group_ids, dtype=torch.long, device=device).repeat_interleave(
                n
            ),
            finished=finished[:, -1],
        )

    def _decode(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        n: int,
        params: SamplingParams,
        generator: torch.Generator | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(B, R) tokens, (B, R) log-probs and (B, R) `finished after step t` flags."""
        decoder = self._decoder()
        logits = decoder.prefill(prompt_ids, prompt_mask, n, params.max_new_tokens)
        eos = self.eos_ids.to(logits.device)
        done = torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
        tokens, logprobs, finished = [], [], []
        for t in range(params.max_new_tokens):
            token, logp = sample_next(logits, params, generator)
            token = token.masked_fill(done, self.pad_id)
            done = done | torch.isin(token, eos)
            tokens.append(token)
            logprobs.append(logp)
            finished.append(done)
            if t + 1 == params.max_new_tokens or bool(done.all()):
                break
            logits = decoder.step(token)
        return torch.stack(tokens, 1), torch.stack(logprobs, 1), torch.stack(finished, 1)
