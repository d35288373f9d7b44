"""The default rollout engine: batched sampling from a transformers model in this process.

Two ways to hold the weights:

- live (`TransformersEngine(live=actor.live_module)`, the fast path on one device and under
  FSDP): it decodes the very module the trainer updates, entered through the actor's
  context (which gathers FSDP shards for the duration), so there is nothing to copy and its
  log-probs are the policy's own; `sync_weights` only records the version.
- own copy (`TransformersEngine(model=...)`): a model of its own, loaded by `sync_weights`
  from the actor's weight stream. Used where sampling must go on while the trainer changes
  its weights (agentic rollouts on a producer thread): the weights are staged by
  `sync_weights` and swapped in between two `generate` calls, so every call samples with one
  known version.

Each distinct prompt is prefilled once and its KV cache shared by its `n` completions;
decoding stops as soon as every row has produced EOS.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor, nn

from ascent.rollout.batch import RolloutBatch
from ascent.rollout.decoders import CacheDecoder, StaticLlamaDecoder
from ascent.rollout.engine import ENGINES, EngineContext
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


class TransformersEngine:
    def __init__(
        self,
        model: nn.Module | None = None,
        *,
        live: Callable[[], contextlib.AbstractContextManager[nn.Module]] | None = None,
        pad_id: int,
        eos_ids: Sequence[int],
        fast: bool = True,
        version: int = 0,
        exact: bool = True,
    ) -> None:
        if (model is None) == (live is None):
            raise ValueError("pass the engine's own model, or live= (the trainer's module)")
        self.model = model
        self.live = live
        # The trainer's own weights; and its numerics when `exact` (float32 compute: in bf16
        # the decoder's kernels round otherwise than the training forward's).
        self.exact_logprobs = live is not None and exact
        self.pad_id = pad_id
        self.eos_ids = torch.as_tensor(sorted(set(eos_ids)), dtype=torch.long)
        self.fast = fast
        self.version = version
        self._staged: tuple[int, dict[str, Tensor]] | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        """Nothing to stop: the engine lives in this process."""

    def sync_weights(self, weights: Iterable[tuple[str, Tensor]], version: int) -> None:
        if self.live is not None:
            self.version = version  # the module IS the trainer's: nothing to load
            return
        staged = {name: tensor.detach().clone() for name, tensor in weights}
        with self._lock:
            self._staged = (version, staged)

    def _apply_staged(self) -> None:
        with self._lock:
            staged, self._staged = self._staged, None
        if staged is None:
            return
        version, tensors = staged
        own = dict(self.model.named_parameters(remove_duplicate=False))
        own |= dict(self.model.named_buffers())
        needed = [n for n, _ in self.model.named_parameters()]  # a tied weight once
        missing = [name for name in needed if name not in tensors]
        unknown = [name for name in tensors if name not in own]
        if unknown or missing:
            raise ValueError(
                f"weights do not fit the engine's model: unknown {unknown[:3]}, "
                f"missing {missing[:3]}"
            )
        with torch.no_grad():
            for name, tensor in tensors.items():
                own[name].copy_(tensor)
        self.version = version

    @contextlib.contextmanager
    def _module(self):
        if self.live is not None:
            with self.live() as module:
                yield module
        else:
            self._apply_staged()
            yield self.model

    def _decoder(self, module: nn.Module) -> StaticLlamaDecoder | CacheDecoder:
        fast = self.fast and StaticLlamaDecoder.supports(module)
        return StaticLlamaDecoder(module) if fast else CacheDecoder(module)

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
        with self._module() as module:
            device = next(module.parameters()).device
            prompt_ids, prompt_mask = left_pad(prompts, self.pad_id, device)
            was_training = module.training
            module.eval()
            try:
                tokens, logprobs, finished = self._decode(
                    module, prompt_ids, prompt_mask, n, params, generator
                )
            finally:
                module.train(was_training)
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
            versions=torch.full((tokens.shape[0],), self.version, dtype=torch.long, device=device),
        )

    def _decode(
        self,
        module: nn.Module,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        n: int,
        params: SamplingParams,
        generator: torch.Generator | None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(B, R) tokens, (B, R) log-probs and (B, R) `finished after step t` flags."""
        decoder = self._decoder(module)
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


@ENGINES.register("transformers")
def build_transformers(ctx: EngineContext) -> TransformersEngine:
    """Decoding the trainer's module in place, or a copy of its own (loaded in the compute
    dtype; the trainer syncs it before the first generate)."""
    if not ctx.own_copy:
        exact = ctx.compute_dtype == torch.float32
        return TransformersEngine(
            live=ctx.live, pad_id=ctx.pad_id, eos_ids=ctx.eos_ids, exact=exact
        )
    from ascent.models import load_frozen

    model_cfg = ctx.cfg.model
    model = load_frozen(model_cfg.name_or_path, model_cfg, ctx.device, ctx.compute_dtype)
    return TransformersEngine(model, pad_id=ctx.pad_id, eos_ids=ctx.eos_ids)
