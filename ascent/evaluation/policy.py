"""The policy under evaluation, behind one interface: an OpenAI-compatible role.

`policy = "api"` uses the `[models]` role named by `[eval] role` through `ApiClient` (retries,
Retry-After, `[rollout] async_workers` requests in flight, usage per role). A model served by
`ascent serve` or vLLM is the same thing with `[api] base_url` on loopback.

`policy = "local"` loads `[model]` (or the run directory's model, or `--checkpoint`) in this
process and puts it behind an in-process `ascent serve` on a free loopback port. Concurrent
requests are then batched into one generate call (up to async_workers prompts), and local and
API evaluations share every later step: the same prompts, context-length checks, failure
records and scoring.

A failure of one request (after its retries) is recorded on that sample. A failure that will
hit every request (no key, a refused key, a wrong base_url, an unknown model, nothing
listening) is fatal: `EndpointFailed` stops the evaluation with the diagnosis.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascent.api import ApiClient, ApiError, RetryPolicy, RoleSpec
from ascent.api.failures import FATAL_ERRORS
from ascent.errors import AscentError, ConfigError
from ascent.rules import LLMConfig

LOCAL_ROLE = "policy"
LOCAL_TIMEOUT_SEC = 24 * 3600.0  # local generation is never cut short by a timeout
# What shortens an evaluation's requests, named in a too-long-request diagnosis.
EVAL_LENGTH_SETTINGS = "[eval] max_new_tokens or set [eval] max_problem_chars"


class EndpointFailed(AscentError):
    """A failure every request would hit; the evaluation stops (exit 2)."""


@dataclass(frozen=True)
class Sample:
    """One completion of a problem, or the diagnosis of why there is none."""

    text: str | None
    finish_reason: str | None = None
    completion_tokens: int = 0
    latency_sec: float = 0.0
    error: str | None = None  # the one-line diagnosis when the request failed

    def to_json(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        return {
            "completion": self.text,
            "finish_reason": self.finish_reason,
            "completion_tokens": self.completion_tokens,
            "latency_sec": round(self.latency_sec, 3),
        }


class Endpoint:
    """Samples completions for prompts from one role of an `ApiClient`."""

    def __init__(self, client: ApiClient, role: str, cfg: LLMConfig, info: dict[str, Any]):
        self.client = client
        self.role = role
        self.info = info  # what results.json records about the policy
        params = {
            "max_tokens": cfg.eval.max_new_tokens,
            "temperature": cfg.eval.temperature,
            "top_p": cfg.eval.top_p,
        }
        self.params = {k: v for k, v in params.items() if v is not None}
        # Requests wait here, not inside the client, so none is sent after a fatal failure.
        self._gate = asyncio.Semaphore(client.concurrency)
        self._fatal: EndpointFailed | None = None

    async def sample(self, prompt: str) -> Sample:
        """One completion; a per-request failure comes back as `Sample.error`."""
        async with self._gate:
            if self._fatal is not None:
                raise self._fatal
            return await self._request(prompt)

    async def _request(self, prompt: str) -> Sample:
        messages = [{"role": "user", "content": prompt}]
        try:
            result = await self.client.chat(self.role, messages, **self.params)
        except FATAL_ERRORS as err:
            self._fatal = EndpointFailed(f"stopping the evaluation: {err}")
            raise self._fatal from None
        except ApiError as err:
            return Sample(None, error=str(err))
        return Sample(
            result.text, result.finish_reason, result.completion_tokens, result.latency_sec
        )


@contextlib.contextmanager
def open_endpoint(
    cfg: LLMConfig,
    run_dir: Path | None = None,
    checkpoint: Path | None = None,
    length_settings: str = EVAL_LENGTH_SETTINGS,
) -> Iterator[Endpoint]:
    """The endpoint `[eval] policy` names; a local policy's server stops on exit.
    `length_settings`: what a too-long-request error tells the user to lower."""
    if cfg.eval.policy == "api":
        if checkpoint is not None:
            raise ConfigError(
                "--checkpoint loads a local model; with [eval] policy = 'api' the endpoint "
                "serves the model (for a checkpoint: ascent serve CHECKPOINT, or policy = 'local')"
            )
        client = ApiClient.from_config(cfg).with_length_settings(length_settings)
        spec = client.spec(cfg.eval.role)  # an unknown role is refused here, before any request
        info = {"policy": "api", "role": spec.role, "model": spec.model, "base_url": spec.base_url}
        yield Endpoint(client, spec.role, cfg, info)
        return
    with _local_server(cfg, run_dir, checkpoint) as (url, policy):
        spec = RoleSpec(LOCAL_ROLE, policy.name, url, api_key_env="",
                        length_settings=length_settings)  # fmt: skip
        client = ApiClient(
            {LOCAL_ROLE: spec},
            policy=RetryPolicy(timeout_sec=LOCAL_TIMEOUT_SEC, max_retries=0),
            concurrency=cfg.rollout.async_workers,
        )
        info = {"policy": "local", "model": policy.source, "device": str(policy.device)}
        yield Endpoint(client, LOCAL_ROLE, cfg, info)


@contextlib.contextmanager
def _local_server(
    cfg: LLMConfig, run_dir: Path | None, checkpoint: Path | None
) -> Iterator[tuple[str, Any]]:
    from ascent.serve.server import PolicyServer

    policy = load_local_policy(cfg, run_dir, checkpoint)
    server = PolicyServer(policy, port=0, max_batch=cfg.rollout.async_workers)
    with server:
        yield server.url, policy


def load_local_policy(cfg: LLMConfig, run_dir: Path | None, checkpoint: Path | None) -> Any:
    """`--checkpoint`, else the run directory's model, else `[model]`, as a `LocalPolicy`."""
    from ascent.models import load_reference, load_tokenizer
    from ascent.runtime import setup_runtime
    from ascent.serve.local_policy import LocalPolicy

    section, name = local_model_section(cfg, run_dir, checkpoint)
    device = setup_runtime(cfg.run)
    model = load_reference(section, device)
    return LocalPolicy(model, load_tokenizer(section), name, section.name_or_path)


def local_model_section(
    cfg: LLMConfig, run_dir: Path | None, checkpoint: Path | None
) -> tuple[Any, str]:
    """The `[model]` section that loads the local policy (`--checkpoint`, else the run
    directory's model, else `[model]` itself), and the name results record it by."""
    from ascent.models.loading import has_tokenizer_files
    from ascent.serve.local_policy import find_model_dir, run_tokenizer

    section = cfg.model.model_copy(update={"ref_model": None})
    name = cfg.model.name_or_path
    target = checkpoint if checkpoint is not None else run_dir
    if target is not None:
        model_dir = find_model_dir(target)
        _name_python_files(model_dir, cfg.model.trust_remote_code)
        own = has_tokenizer_files(model_dir)
        tokenizer = None if own else run_tokenizer(model_dir) or section.tokenizer or name
        section = section.model_copy(
            update={"name_or_path": str(model_dir), "tokenizer": tokenizer}
        )
        name = Path(target).resolve().name
    return section, name


def _name_python_files(model_dir: Path, trusted: bool) -> None:
    """A model directory is data; Python files in it run only under trust_remote_code, and
    either way they are named, so that code shipped inside a run directory is never silent."""
    files = sorted(p.name for p in Path(model_dir).glob("*.py"))
    if not files:
        return
    what = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    if trusted:
        note = "trust_remote_code is set for this command, so transformers may run them"
    else:
        note = "they are not run (trust_remote_code is off)"
    print(f"warning: {model_dir} holds Python files ({what}); {note}", file=sys.stderr)
