"""An async client for API-served roles over the official `openai` package.

    client = ApiClient.from_config(cfg)  # the roles of [models]; concurrency: async_workers
    async with client:
        result = await client.chat("solver", [{"role": "user", "content": "..."}], max_tokens=512)
    print(result.text, result.completion_tokens)

The `openai` client's own retries are off; this one retries 429 / 5xx / timeouts / dropped
connections / empty answers with exponential backoff and jitter, waits what `Retry-After` asks
(capped at max_wait_sec), keeps at most `concurrency` requests in flight, switches to the
role's fallback model when the primary still fails, and counts tokens per role. Every failure
comes out as one `ApiError` subclass from `ascent.api.diagnoses`.

A client may be used from one event loop after another (`asyncio.run` per evaluation or per
training step): the semaphore and the HTTP connections belong to the loop that made them, so
a new loop gets fresh ones. Close the client in each loop (`async with client:`) to release
its connections there. Two loops at once (two threads) are refused: give each thread its own
client, sharing one `UsageLedger`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ascent.api.diagnoses import (
    ApiError,
    CallContext,
    diagnose,
    is_transient,
    models_not_listed,
    no_choices,
    not_an_api,
    retry_after,
)
from ascent.api.keys import KeySource, Secret
from ascent.api.roles import RoleSpec, resolve_roles
from ascent.api.usage import UsageLedger
from ascent.config.api import ApiSection
from ascent.errors import ConfigError, did_you_mean
from ascent.rules import ClassicConfig, LLMConfig

log = logging.getLogger("ascent.api")

Message = Mapping[str, Any]


@dataclass(frozen=True)
class ChatResult:
    """One answer of a role."""

    role: str
    model: str  # the model that answered (the fallback when it was used)
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    latency_sec: float  # of the successful attempt
    attempts: int  # requests sent for the model that answered
    used_fallback: bool = False


def _api_default(name: str) -> Any:
    return ApiSection.model_fields[name].default


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait for an answer, and how to retry a transient failure.

    Unset fields take `[api]`'s defaults (`ApiSection`), so there is one place to change them.
    """

    timeout_sec: float = _api_default("timeout_sec")
    max_retries: int = _api_default("max_retries")
    backoff_sec: float = _api_default("backoff_sec")
    max_wait_sec: float = _api_default("max_wait_sec")

    @classmethod
    def from_section(cls, api: ApiSection) -> RetryPolicy:
        """The policy an `[api]` section sets."""
        return cls(api.timeout_sec, api.max_retries, api.backoff_sec, api.max_wait_sec)

    def wait(self, retry: int, asked: float | None, rng: random.Random) -> float:
        """Seconds before retry number `retry` (0-based): Retry-After, else backoff with jitter."""
        if asked is not None:
            return min(asked, self.max_wait_sec)
        return min(self.max_wait_sec, self.backoff_sec * 2**retry * rng.uniform(0.75, 1.25))


class ApiClient:
    """Chat completions for named roles, with retries, a concurrency limit and usage counts."""

    def __init__(
        self,
        roles: Mapping[str, RoleSpec],
        *,
        concurrency: int,
        keys: KeySource | None = None,
        policy: RetryPolicy | None = None,
        usage: UsageLedger | None = None,
        seed: int | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigError(f"API concurrency must be at least 1 (got {concurrency})")
        self.roles = dict(roles)
        self.keys = keys or KeySource()
        self.policy = policy or RetryPolicy()
        self.concurrency = concurrency
        self.usage = usage or UsageLedger()
        self._rng = random.Random(seed)
        self._secrets: dict[str, Secret] = {}
        # The event loop in use, with what is bound to it (see _bind).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sem = asyncio.Semaphore(concurrency)
        self._clients: dict[tuple[str, str], Any] = {}
        self._bind_lock = threading.Lock()

    @classmethod
    def from_config(
        cls, cfg: LLMConfig | ClassicConfig, usage: UsageLedger | None = None
    ) -> ApiClient:
        """The roles a run calls, from its [api] and [models].

        An LLM run: every role in [models], at most [rollout] async_workers requests in
        flight. A classic PPO run calls only the log assistant, one analysis at a time: its
        role when [assistant] is enabled, else none. Pass the run's `usage` ledger so every
        client of the run counts into one.
        """
        keys = KeySource.beside(cfg.source, cfg.api.env_file)
        if isinstance(cfg, ClassicConfig):
            roles = resolve_roles(cfg.api, cfg.models, keys) if cfg.assistant.enabled else {}
            concurrency = 1
        else:
            roles = resolve_roles(cfg.api, cfg.models, keys)
            concurrency = cfg.rollout.async_workers
        return cls(
            roles,
            concurrency=concurrency,
            keys=keys,
            policy=RetryPolicy.from_section(cfg.api),
            usage=usage,
        )

    # -- public -------------------------------------------------------------------------------

    def with_length_settings(self, settings: str) -> ApiClient:
        """Name `settings` as what shortens every role's requests in a too-long-request
        diagnosis (the command's own keys: `ascent eval`'s, `ascent data grade`'s)."""
        named = {r: dataclasses.replace(s, length_settings=settings) for r, s in self.roles.items()}
        self.roles = named
        return self

    def spec(self, role: str) -> RoleSpec:
        try:
            return self.roles[role]
        except KeyError:
            known = ", ".join(self.roles) or "none"
            raise ConfigError(
                f"role {role!r} has no model{did_you_mean(role, self.roles)}; add "
                f'{role}_model = "name" to [models] (configured roles: {known})'
            ) from None

    async def chat(
        self,
        role: str,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        stop: str | Sequence[str] | None = None,
        **extra: Any,
    ) -> ChatResult:
        """One chat completion for `role`; raises an `ApiError` with the diagnosis on failure."""
        spec = self.spec(role)
        params = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "top_p": top_p,
            "stop": stop,
        }
        params = {k: v for k, v in params.items() if v is not None} | extra
        try:
            return await self._with_retries(spec, spec.model, messages, params)
        except ApiError as primary:
            if not (primary.model_level and spec.fallback):
                self.usage.count(role, "failures")
                raise
            log.warning("%s; trying fallback model %s", primary, spec.fallback)
            self.usage.count(role, "fallbacks")
            try:
                result = await self._with_retries(spec, spec.fallback, messages, params)
            except ApiError as second:
                self.usage.count(role, "failures")
                raise type(primary)(
                    f"{primary}; fallback {spec.fallback!r} failed too: {second}",
                    attempts=primary.attempts,
                ) from None
            return dataclasses.replace(result, used_fallback=True)

    async def list_models(self, role: str) -> list[str]:
        """Model ids the role's endpoint lists at `/models` (raises an `ApiError` if it cannot)."""
        import openai

        spec = self.spec(role)
        try:
            return await self._list_models(spec)
        except openai.APIStatusError as exc:
            ctx = self._context(spec, spec.model, None)
            if exc.status_code in (404, 405):
                raise models_not_listed(ctx, exc.status_code) from None
            raise await diagnose(exc, ctx, attempts=1) from None
        except Exception as exc:
            raise await diagnose(exc, self._context(spec, spec.model, None), attempts=1) from None

    async def aclose(self) -> None:
        """Close the HTTP connections opened in the running event loop."""
        self._bind()
        for client in self._clients.values():
            await client.close()
        self._clients.clear()

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"ApiClient(roles={sorted(self.roles)}, concurrency={self.concurrency})"

    # -- internals ----------------------------------------------------------------------------

    def _bind(self) -> None:
        """Make the semaphore and the openai clients belong to the running event loop.

        asyncio primitives and httpx connections cannot cross loops; on a new loop the old
        ones are dropped (their loop has finished) and fresh ones made.
        """
        loop = asyncio.get_running_loop()
        with self._bind_lock:
            if loop is self._loop:
                return
            if self._loop is not None and self._loop.is_running():
                raise RuntimeError(
                    "this ApiClient is in use by another event loop (another thread); build "
                    "one client per thread (they may share a UsageLedger)"
                )
            self._loop = loop
            self._sem = asyncio.Semaphore(self.concurrency)
            self._clients = {}

    def _secret(self, spec: RoleSpec) -> Secret:
        if spec.api_key_env not in self._secrets:
            self._secrets[spec.api_key_env] = self.keys.require(spec.api_key_env, spec.role)
        return self._secrets[spec.api_key_env]

    def _openai(self, spec: RoleSpec) -> Any:
        import openai

        self._bind()
        key = (spec.base_url, spec.api_key_env)
        if key not in self._clients:
            self._clients[key] = openai.AsyncOpenAI(
                base_url=spec.base_url,
                api_key=self._secret(spec).reveal(),
                timeout=self.policy.timeout_sec,
                max_retries=0,
                # openai's own default closes itself on garbage collection by scheduling the
                # close on whatever loop then runs: for a client dropped with its finished
                # loop (see _bind) that fails noisily. This one is simply collected.
                http_client=openai.DefaultAsyncHttpxClient(),
            )
        return self._clients[key]

    def _context(self, spec: RoleSpec, model: str, max_tokens: int | None) -> CallContext:
        secret = self._secrets.get(spec.api_key_env)
        return CallContext(
            role=spec.role,
            model=model,
            base_url=spec.base_url,
            key_var=spec.api_key_env,
            max_retries=self.policy.max_retries,
            timeout_sec=self.policy.timeout_sec,
            concurrency=self.concurrency,
            max_tokens=max_tokens,
            secrets=(secret.reveal(),) if secret else (),
            length_settings=spec.length_settings,
        )

    async def _list_models(self, spec: RoleSpec) -> list[str]:
        page = await self._openai(spec).models.list()
        return [m.id for m in page.data]

    async def _with_retries(
        self, spec: RoleSpec, model: str, messages: Sequence[Message], params: dict[str, Any]
    ) -> ChatResult:
        client = self._openai(spec)  # a missing key fails here, before any request
        ctx = self._context(spec, model, params.get("max_tokens"))
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._once(client, ctx, messages, params, attempt)
            except Exception as exc:
                if attempt > self.policy.max_retries or not is_transient(exc):
                    raise await diagnose(
                        exc, ctx, attempts=attempt, list_models=lambda: self._list_models(spec)
                    ) from None
                delay = self.policy.wait(attempt - 1, retry_after(exc), self._rng)
                self.usage.count(spec.role, "retries")
                log.info(
                    "role %s (%s): %s; retry %d/%d in %.2f s",
                    spec.role,
                    model,
                    _short(exc),
                    attempt,
                    self.policy.max_retries,
                    delay,
                )
                await asyncio.sleep(delay)

    async def _once(
        self,
        client: Any,
        ctx: CallContext,
        messages: Sequence[Message],
        params: dict[str, Any],
        attempt: int,
    ) -> ChatResult:
        async with self._sem:
            start = time.monotonic()
            resp = await client.chat.completions.create(
                model=ctx.model, messages=list(messages), **params
            )
            latency = time.monotonic() - start
        if isinstance(resp, str):
            raise not_an_api(ctx, resp, attempt)
        choices = getattr(resp, "choices", None)
        if not choices:
            raise no_choices(ctx, (getattr(resp, "model_extra", None) or {}).get("error"), attempt)
        choice = choices[0]
        usage = getattr(resp, "usage", None)
        prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
        completion_tokens = getattr(usage, "completion_tokens", 0) or 0
        self.usage.answered(ctx.role, prompt_tokens, completion_tokens, latency)
        message = getattr(choice, "message", None)
        return ChatResult(
            role=ctx.role,
            model=ctx.model,
            text=(getattr(message, "content", None) or ""),
            finish_reason=getattr(choice, "finish_reason", None),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            latency_sec=latency,
            attempts=attempt,
        )


def _short(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    if status is not None:
        return f"HTTP {status}"
    return type(exc).__name__
