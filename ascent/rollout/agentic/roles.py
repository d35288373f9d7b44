"""Who answers a role: the trained policy (batched, with behaviour log-probs) or an API model.

The policy's turns are sampled by a rollout engine with weights of its own (the trainer
updates its own weights meanwhile): the trainer sends each new version with
`engine.sync_weights`, the engine swaps it in between two generate calls, so every policy
turn is sampled by one known version (its rows say which), and its log-probs are the
behaviour log-probs of that turn.

`PolicyBatcher` gathers the policy turns that episodes ask for at the same moment into one
generate call, on a thread of its own so the event loop keeps serving the sandbox and API.
`ApiRoles` sends the other roles to `ApiClient` (retries, fallbacks, usage per role).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.api import ApiClient, ApiError
from ascent.api.failures import FATAL_ERRORS
from ascent.rollout.engine import RolloutEngine
from ascent.rollout.sampling import SamplingParams
from ascent.runtime import caller_threads


@dataclass(frozen=True)
class Generated:
    """One policy turn."""

    ids: list[int]  # sampled tokens (EOS included when it ended the turn)
    logprobs: list[float]  # behaviour log-probs of those tokens
    finished: bool  # ended with EOS (False: cut by max_new_tokens)
    text: str  # decoded, special tokens dropped
    version: int  # policy version that sampled it


class PolicyBatcher:
    """Batches concurrent policy turns into generate calls on one worker thread."""

    def __init__(
        self,
        engine: RolloutEngine,
        tokenizer: PreTrainedTokenizerBase,
        sampling: SamplingParams,
        generator: torch.Generator,
        max_batch: int,
    ) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.generator = generator
        self.max_batch = max_batch
        self.executor = ThreadPoolExecutor(
            1, thread_name_prefix="ascent-agentic-generate", initializer=caller_threads()
        )
        self._pending: list[tuple[list[int], asyncio.Future[Generated]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self.calls = 0

    async def generate(self, context: list[int]) -> Generated:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Generated] = loop.create_future()
        self._pending.append((context, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)  # let every episode that is ready ask first
        while self._pending:
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
            contexts = [c for c, _ in batch]
            try:
                results = await loop.run_in_executor(self.executor, self._generate, contexts)
            except Exception as err:  # the episodes that asked fail with it
                for _, future in batch:
                    if not future.done():
                        future.set_exception(err)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
            await asyncio.sleep(0)

    def _generate(self, contexts: list[list[int]]) -> list[Generated]:
        self.calls += 1
        batch = self.engine.generate(
            contexts, list(range(len(contexts))), 1, self.sampling, self.generator
        )
        out = []
        for i in range(len(contexts)):
            n = int(batch.response_mask[i].sum())
            ids = batch.response_ids[i, :n].tolist()
            out.append(
                Generated(
                    ids=ids,
                    logprobs=batch.logprobs[i, :n].tolist(),
                    finished=bool(batch.finished[i]),
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    version=int(batch.versions[i]),
                )
            )
        return out

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


class ApiRoles:
    """Roles served by `ApiClient`; a request that fails after its retries is a recorded turn
    with no text, while a failure every request would hit stops the run."""

    def __init__(self, client: ApiClient, params: dict[str, Any]) -> None:
        self.client = client
        self.params = {k: v for k, v in params.items() if v is not None}

    async def generate(self, role: str, messages: list[dict[str, Any]]) -> tuple[str, int, str]:
        """(text, completion tokens, error note) of one answer."""
        try:
            result = await self.client.chat(role, messages, **self.params)
        except FATAL_ERRORS:
            raise
        except ApiError as err:
            return "", 0, f"api error: {err}"
        return result.text, result.completion_tokens, ""

    async def aclose(self) -> None:
        await self.client.aclose()
