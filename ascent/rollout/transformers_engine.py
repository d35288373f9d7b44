"""The default rollout engine: batched sampling from a transformers model in this process.

Two ways to hold the weights:

- live (`TransformersEngine(live=actor.live_module)`, the fast path on one device and under
  FSDP): it decodes the module the trainer updates, entered through the actor's context
  (which gathers FSDP shards for the duration); `sync_weights` only records the version.
  The static decoder reads the module's weights packed for decoding (decoders.PackedLlama,
  in the decode dtype, packed for each call); in float32 its log-probs are the policy's own.
- own copy (`TransformersEngine(model=...)`): a model of its own, loaded by `sync_weights`
  from the actor's weight stream (LoRA adapters alone when the copy carries adapters). Used
  where sampling must go on while the trainer changes its weights (agentic rollouts and
  asynchronous rollouts on a producer thread): the weights are staged by `sync_weights` and
  swapped in between two `generate` calls, so every call samples with one known version;
  or, with `partial` ([rollout] partial), also between two decode steps of a call: the rows
  still decoding are prefilled again (prompt + their tokens so far) with the new weights and
  go on from there, so every token is sampled, and its log-prob computed, by one version's
  weights over a cache of that version; a row's `versions` is the oldest that sampled it.

One `generate` runs at a time per engine (a second caller, say an evaluation on the trainer's
thread while a prefetch thread samples, waits for the first to finish): weights are never
swapped under a call that is decoding, and its rows carry the version it started with.

Each distinct prompt is prefilled once and its KV cache shared by its `n` completions; rows
that end (EOS or a stop string) leave the batch as they go, and decoding stops as soon as
every row has ended.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor, nn

from ascent.models.interface import base_model
from ascent.names import EngineTraits
from ascent.rollout.batch import RolloutBatch
from ascent.rollout.decoders import CacheDecoder, PackedLlama, StaticLlamaDecoder
from ascent.rollout.engine import ENGINES, EngineContext
from ascent.rollout.sampling import SamplingParams, sample_next
from ascent.rollout.transport import InPlace, StateDict, Transport


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
        dtype: torch.dtype | None = None,
        decode: Callable[[list[int]], str] | None = None,
        partial: bool = False,
    ) -> None:
        if (model is None) == (live is None):
            raise ValueError("pass the engine's own model, or live= (the trainer's module)")
        self.model = model
        self.live = live
        # The trainer's own weights; and its numerics when `exact` (float32 compute: in bf16
        # the decoder's kernels round otherwise than the training forward's).
        self.exact_logprobs = live is not None and exact
        # An own copy wrapped in LoRA adapters is synced with the adapters alone.
        self.takes_adapters = model is not None and bool(getattr(model, "peft_config", None))
        self.pad_id = pad_id
        self.eos_ids = torch.as_tensor(sorted(set(eos_ids)), dtype=torch.long)
        self.fast = fast
        self.dtype = dtype  # the fast decoder's weights and activations; None: the model's
        self.decode = decode  # token ids -> text, to find stop strings
        self.version = version
        self.partial = partial and model is not None  # new weights between decode steps
        self.swaps = 0  # weight swaps inside generate calls so far (partial)
        # in place: the trainer's module; else a copy of the weights, loaded before a generate
        self.transport: Transport = InPlace() if live is not None else StateDict(clone=True)
        self._staged: tuple[int, dict[str, Tensor]] | None = None
        self._lock = threading.Lock()  # guards _staged
        self._generating = threading.Lock()  # one generate call at a time

    def close(self) -> None:
        """Nothing to stop: the engine lives in this process."""

    def metrics(self) -> dict[str, float]:
        """With partial generations: the weight swaps made inside generate calls so far."""
        return {"rollout/weight_swaps": float(self.swaps)} if self.partial else {}

    def sync_weights(self, weights: Iterable[tuple[str, Tensor]], version: int) -> None:
        staged = self.transport.send(weights, version)
        if self.live is not None:
            self.version = version  # the module IS the trainer's: nothing to load
            return
        with self._lock:
            self._staged = (version, staged)

    def _apply_staged(self) -> None:
        with self._lock:
            staged, self._staged = self._staged, None
        if staged is None:
            return
        version, tensors = staged
        core = base_model(self.model)
        own = dict(core.named_parameters(remove_duplicate=False))
        own |= dict(core.named_buffers())
        needed = [n for n, _ in core.named_parameters()]  # a tied weight once
        if self.takes_adapters:
            needed = [n for n in needed if ".lora_" in n]
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
        """The static decoder over weights packed for this call (a copy in the decode dtype,
        in bf16 on a CPU reordered for oneDNN: about 0.17 s for 135 M parameters, and freed
        with the call, so it never sits in memory beside the trainer's update); any other
        model through its own forward."""
        if not (self.fast and StaticLlamaDecoder.supports(module)):
            return CacheDecoder(module)
        dtype = self.dtype or next(module.parameters()).dtype
        return StaticLlamaDecoder(PackedLlama.from_model(module, dtype))

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
        with self._generating, self._module() as module:
            version = self.version  # what this call samples with, staged weights applied
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
            versions=torch.full((tokens.shape[0],), version, dtype=torch.long, device=device),
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
        """(B, R) tokens, (B, R) log-probs and (B, R) `finished after step t` flags.

        Rows that end (EOS, or a stop string) leave the decoder once a quarter of the rows
        it still carries have ended: copying the caches of the rest costs about one step on
        torch operations (the C kernels copy nothing), and the rows left decode without the
        dead ones.
        """
        decoder = self._decoder(module)
        logits = decoder.prefill(prompt_ids, prompt_mask, n, params.max_new_tokens)
        device = logits.device
        b, width = logits.shape[0], params.max_new_tokens
        tokens = torch.full((b, width), self.pad_id, dtype=torch.long, device=device)
        logprobs = torch.zeros((b, width), dtype=torch.float32, device=device)
        ended_at = torch.full((b,), width, dtype=torch.long, device=device)
        stops = StopStrings(params.stop, self.decode) if params.stop else None
        eos = self.eos_ids.to(device)
        rows = torch.arange(b, device=device)  # the original row of each row decoded
        alive = torch.ones(b, dtype=torch.bool, device=device)
        steps = 0
        for t in range(width):
            token, logp = sample_next(logits, params, generator)
            token = token.masked_fill(~alive, self.pad_id)
            live = rows[alive]
            tokens[live, t] = token[alive]
            logprobs[live, t] = logp[alive]
            ended = alive & torch.isin(token, eos)
            if stops is not None:
                ended |= alive & stops.hit(tokens, rows, t)
            ended_at[rows[ended]] = t
            alive &= ~ended
            steps = t + 1
            if steps == width or not bool(alive.any()):
                break
            if self.partial and self._staged is not None:  # the trainer published a version
                decoder, logits, rows = self._continue_with_new_weights(
                    module, prompt_ids, prompt_mask, n, tokens, rows[alive], t + 1, width
                )
                alive = torch.ones(len(rows), dtype=torch.bool, device=device)
                continue
            dead = len(alive) - int(alive.sum())
            keep = _compacted(alive) if 4 * dead >= len(alive) else None
            if keep is not None and len(keep) < len(alive):  # (rounding up may keep them all)
                decoder.keep(keep)
                rows, alive, token = rows[keep], alive[keep], token[keep]
            logits = decoder.step(token)
        positions = torch.arange(steps, device=device)
        finished = positions[None, :] >= ended_at[:, None]
        return tokens[:, :steps], logprobs[:, :steps], finished

    def _continue_with_new_weights(
        self,
        module: nn.Module,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        n: int,
        tokens: Tensor,
        live: Tensor,
        done: int,
        width: int,
    ) -> tuple[StaticLlamaDecoder | CacheDecoder, Tensor, Tensor]:
        """Load the staged weights and prefill the rows still decoding (original rows `live`,
        `done` tokens each) again with them: (decoder, next-token logits, rows)."""
        self._apply_staged()
        self.swaps += 1
        decoder = self._decoder(module)
        prompt = live // n  # each row's prompt (rows are prompt-major, n per prompt)
        ids = torch.cat([prompt_ids[prompt], tokens[live, :done]], dim=-1)
        mask = torch.cat([prompt_mask[prompt], torch.ones_like(tokens[live, :done])], dim=-1)
        return decoder, decoder.prefill(ids, mask, 1, width - done), live


ROW_MULTIPLE = 16  # CPU matrix kernels (AMX tiles) run at full rate on multiples of 16 rows


def _compacted(alive: Tensor) -> Tensor:
    """The rows to go on with: every live one, and as few ended ones as make the count a
    multiple of ROW_MULTIPLE (measured in bf16 on AMX: 110 rows took 1.42 ms a layer, 112
    rows 0.99 ms)."""
    live = alive.nonzero().squeeze(-1)
    extra = min((-len(live)) % ROW_MULTIPLE, len(alive) - len(live))
    return torch.cat([live, (~alive).nonzero().squeeze(-1)[:extra]]).sort().values


class StopStrings:
    """Which rows have just completed one of `strings` (`[rollout] stop`). Only the newest
    tokens are decoded: a stop string that ends at the newest token lies within its last
    len(string) + 1 tokens, and one that ended earlier stopped its row then."""

    def __init__(self, strings: Sequence[str], decode: Callable[[list[int]], str] | None):
        if decode is None:
            raise ValueError("stop strings need the engine's decode function (the tokenizer)")
        self.strings = list(strings)
        self.decode = decode
        self.window = max(len(s) for s in self.strings) + 1

    def hit(self, tokens: Tensor, rows: Tensor, t: int) -> Tensor:
        """(len(rows),) bool: the row's text up to token t now holds a stop string."""
        start = max(0, t + 1 - self.window)
        tails = tokens[rows, start : t + 1].tolist()
        found = [any(s in self.decode(tail) for s in self.strings) for tail in tails]
        return torch.tensor(found, dtype=torch.bool, device=tokens.device)


@ENGINES.register(
    "transformers",
    # decodes the trainer's module (or a copy of it) in this process with torch's own kernels
    traits=EngineTraits(agentic=True, ray_replicas=True, exact_float32=True, partial=True),
)
def build_transformers(ctx: EngineContext) -> TransformersEngine:
    """Decoding the trainer's module in place, or a copy of its own (loaded in the compute
    dtype; the trainer syncs it before the first generate)."""
    ids = {"pad_id": ctx.pad_id, "eos_ids": ctx.eos_ids, "decode": ctx.decode}
    if not ctx.own_copy:
        exact = ctx.compute_dtype == torch.float32
        return TransformersEngine(live=ctx.live, exact=exact, dtype=ctx.compute_dtype, **ids)
    from ascent.models import add_lora, load_frozen

    model_cfg = ctx.cfg.model
    model = load_frozen(model_cfg.name_or_path, model_cfg, ctx.device, ctx.compute_dtype)
    if model_cfg.lora.enabled:  # the base weights stay; each sync sends the adapters alone
        model = add_lora(model, model_cfg.lora).requires_grad_(False)
    return TransformersEngine(model, partial=ctx.cfg.rollout.partial, **ids)
