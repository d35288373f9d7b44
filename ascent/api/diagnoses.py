"""What went wrong on the API channel, as one line that says what to do.

Each failure users hit most has its own `ApiError` subclass (ascent.api.failures) and
message, tested one by one against a scripted server in tests/api/test_client_faults.py.
`diagnose` maps an exception from the `openai` client (or a bad answer) to one of them;
`is_transient` and `retry_after` tell the client whether and when to retry. An unknown model
is recognised whether the endpoint answers 404 (OpenAI, vLLM) or 400 (OpenRouter's "not a
valid model ID", DeepSeek's "Model Not Exist"); either way /models is asked for the names it
serves, and the role's fallback model applies. Server-provided text is scrubbed of anything
key-shaped before it reaches a message.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import urllib.request
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit, urlunsplit

from ascent.api.failures import (  # noqa: F401 re-exported
    ApiError,
    AuthError,
    BadResponseError,
    BaseUrlError,
    KeyLooksLikeNameError,
    KeyMissingError,
    MaxTokensError,
    NoChoicesError,
    ProxyError,
    RateLimitedError,
    RequestRejectedError,
    RequestTimeoutError,
    ServerError,
    UnknownModelError,
    UnreachableError,
)

# The failure classes live in failures.py; callers may name them from here too.
from ascent.secrets import redact


@dataclass(frozen=True)
class CallContext:
    """What a message needs to know about the call that failed."""

    role: str
    model: str
    base_url: str
    key_var: str
    max_retries: int = 0
    timeout_sec: float = 0.0
    concurrency: int = 1
    max_tokens: int | None = None
    secrets: Sequence[str] = field(default_factory=tuple, repr=False)
    length_settings: str = ""  # what shortens this role's requests (RoleSpec.length_settings)

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc

    @property
    def who(self) -> str:
        return f"role {self.role} ({self.model})"


# What shortens a request, for a role whose caller names nothing more precise.
_LENGTH_SETTINGS = "max_tokens / [rollout] max_new_tokens or shorten the prompt"
RETRY_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))


def is_transient(exc: BaseException) -> bool:
    """Whether a retry may succeed: 408/409/429/5xx, timeouts, dropped connections, no choices."""
    import openai

    if isinstance(exc, NoChoicesError):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRY_STATUS
    return isinstance(exc, openai.APIConnectionError)  # includes APITimeoutError


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked to wait (Retry-After-Ms, Retry-After seconds or date)."""
    response = getattr(exc, "response", None)
    if response is None:
        return None
    headers = response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            pass
        try:
            import time

            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            pass
    return None


def proxy_for(url: str) -> tuple[str, str] | None:
    """(variable name, proxy URL without credentials) of the proxy that would carry `url`."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    names = [f"{parts.scheme}_proxy", "all_proxy"]
    for name in names:
        for var in (name, name.upper()):
            value = os.environ.get(var)
            if not value:
                continue
            if urllib.request.proxy_bypass_environment(host):
                return None
            p = urlsplit(value if "://" in value else f"http://{value}")
            netloc = p.hostname or ""
            if p.port:
                netloc += f":{p.port}"
            return var, urlunsplit((p.scheme, netloc, "", "", ""))
    return None


def server_text(exc: BaseException, secrets: Sequence[str]) -> str:
    """The server's own explanation, key-scrubbed, on one line, at most 200 characters."""
    body = getattr(exc, "body", None)
    text = ""
    if isinstance(body, dict):
        err = body.get("error", body)
        text = err.get("message", "") if isinstance(err, dict) else str(err)
        if not text:
            text = json.dumps(body)[:200]
    elif body is not None:
        text = str(body)
    else:
        text = getattr(exc, "message", "") or str(exc)
    text = " ".join(redact(str(text), secrets).split())
    return text[:200] + ("…" if len(text) > 200 else "")


_MAX_TOKENS_PAT = re.compile(
    r"max_tokens|max_completion_tokens|maximum context length|context[_ ]length|"
    r"too many tokens|context window",
    re.IGNORECASE,
)


_UNKNOWN_MODEL_PAT = re.compile(
    r"\bmodel\b.*\b(not found|not exist|does ?n[o']t exist|not (a )?valid|unknown|no such)\b|"
    r"\b(invalid|unknown|no such) model\b|\bmodel[ _-]?id\b|\bmodel_not_found\b",
    re.IGNORECASE,
)
_REASONS = {408: "Request Timeout", 409: "Conflict"}


def names_unknown_model(said: str, code: object = None) -> bool:
    """Whether an error text (or code) says the model name is unknown or invalid.

    OpenAI says "The model `x` does not exist", OpenRouter "x is not a valid model ID",
    DeepSeek "Model Not Exist", vLLM "The model `x` does not exist."
    """
    return code == "model_not_found" or bool(_UNKNOWN_MODEL_PAT.search(said))


def _error_code(exc: BaseException) -> object:
    body = getattr(exc, "body", None)
    err = body.get("error", body) if isinstance(body, dict) else None
    return err.get("code") if isinstance(err, dict) else None


async def diagnose(
    exc: BaseException,
    ctx: CallContext,
    *,
    attempts: int,
    list_models: Callable[[], Awaitable[list[str]]] | None = None,
) -> ApiError:
    """The one-line diagnosis for `exc`, raised by a call described by `ctx`."""
    import openai

    if isinstance(exc, ApiError):
        exc.attempts = attempts
        return exc
    retries = f" after {attempts - 1} retr{'y' if attempts == 2 else 'ies'}" if attempts > 1 else ""
    where = f"{ctx.who} at {ctx.host}"
    if isinstance(exc, openai.APITimeoutError):
        return RequestTimeoutError(
            f"{where}: no answer within timeout_sec={ctx.timeout_sec:g} s{retries}; raise [api] "
            "timeout_sec, lower max_tokens, or set a fallback model",
            attempts=attempts,
        )
    if isinstance(exc, openai.APIConnectionError):
        proxy = proxy_for(ctx.base_url)
        cause = _root_cause(exc)
        if proxy is not None:
            var, url = proxy
            return ProxyError(
                f"{where}: could not connect through the proxy in {var} ({url}): {cause}; start "
                f"that proxy, unset {var}, or add {urlsplit(ctx.base_url).hostname} to NO_PROXY",
                attempts=attempts,
            )
        return UnreachableError(
            f"{where}: could not connect to {ctx.base_url} ({cause}){retries}; check base_url "
            "and that the server is running",
            attempts=attempts,
        )
    if isinstance(exc, openai.APIStatusError):
        return await _diagnose_status(exc, ctx, where, retries, attempts, list_models)
    if isinstance(exc, ValueError):  # json.JSONDecodeError: a truncated or non-JSON body
        return BadResponseError(
            f"{where}: the answer is not valid JSON ({exc}); the endpoint or a proxy cut it "
            "short, or base_url is not an OpenAI-compatible API",
            attempts=attempts,
        )
    raise exc


async def _diagnose_status(
    exc, ctx: CallContext, where: str, retries: str, attempts: int, list_models
) -> ApiError:
    status = exc.status_code
    said = server_text(exc, ctx.secrets)
    if status in (401, 403) and not ctx.key_var:
        return AuthError(
            f"{where}: {status}: this endpoint wants a key but api_key_env is empty; set "
            "[api] api_key_env (or the role's) to the NAME of the variable holding the key",
            attempts=attempts,
        )
    if status in (401, 403):
        return AuthError(
            f"{where}: {status} {'Unauthorized' if status == 401 else 'Forbidden'}: the key in "
            f"{ctx.key_var} was refused; check that it is a valid key for {ctx.host} (not "
            "expired, not another provider's), or point this role's api_key_env at the right one",
            attempts=attempts,
        )
    if status == 429:
        return RateLimitedError(
            f"{where}: still rate-limited (429){retries}; lower [rollout] async_workers (now "
            f"{ctx.concurrency}), raise [api] max_retries, or give this role its own key "
            f"([models.{ctx.role}] api_key_env)",
            attempts=attempts,
        )
    if status >= 500:
        return ServerError(
            f"{where}: server error {status}{retries} ({said}); the endpoint is failing: try "
            f"later or set [models.{ctx.role}] fallback",
            attempts=attempts,
        )
    if status in (400, 413, 422) and _MAX_TOKENS_PAT.search(said):
        limit = re.search(r"(?:at most|maximum context length is|limit(?: is| of)?)\s*(\d+)", said)
        asked = f"max_tokens={ctx.max_tokens}" if ctx.max_tokens is not None else "max_tokens"
        bound = f" (the model allows {limit.group(1)} tokens)" if limit else ""
        return MaxTokensError(
            f"{where}: {asked} plus the prompt is over the model's limit{bound}; lower "
            f"{ctx.length_settings or _LENGTH_SETTINGS} (server: {said})",
            attempts=attempts,
        )
    about_model = status in (400, 404) and names_unknown_model(said, _error_code(exc))
    if status == 404 or about_model:
        return await _diagnose_not_found(
            ctx, where, status, said, about_model, attempts, list_models
        )
    if status in RETRY_STATUS:  # 408 / 409 after every retry
        return ServerError(
            f"{where}: {status} {_REASONS.get(status, '')}{retries} ({said}); a transient "
            "failure on the endpoint's side, not a fault in the request: retry later, raise "
            f"[api] max_retries, or set [models.{ctx.role}] fallback",
            attempts=attempts,
        )
    return RequestRejectedError(
        f"{where}: request rejected with {status}: {said}; fix the request or the model's settings",
        attempts=attempts,
    )


async def _diagnose_not_found(
    ctx: CallContext,
    where: str,
    status: int,
    said: str,
    about_model: bool,
    attempts: int,
    list_models: Callable[[], Awaitable[list[str]]] | None,
) -> ApiError:
    """A 404, or a 400 about the model: a wrong base_url or an unknown model; /models tells."""
    available: list[str] | None = None
    if list_models is not None:
        try:
            available = await list_models()
        except Exception:
            available = None
    if available and ctx.model not in available:
        return unknown_model(ctx, available, attempts)
    if available and about_model:
        return UnknownModelError(
            f"{where}: {status}: the endpoint refuses model {ctx.model!r} although /models lists "
            f"it ({said}); it may not serve chat completions: pick another model in [models] "
            f"or set [models.{ctx.role}] fallback",
            attempts=attempts,
        )
    if available:
        return BaseUrlError(
            f"{where}: 404 for chat completions although /models lists {ctx.model}; "
            f"base_url {ctx.base_url} may serve only part of the API ({said})",
            attempts=attempts,
        )
    if about_model:
        return UnknownModelError(
            f"{where}: the endpoint does not know model {ctx.model!r} ({said}); check the "
            "model name in [models] (the endpoint does not list its models)",
            attempts=attempts,
        )
    unversioned = (
        " (a root without /v1, such as https://api.perplexity.ai, needs [api] append_v1 = false)"
        if ctx.base_url.endswith("/v1")
        else ""
    )
    return BaseUrlError(
        f"{where}: 404 Not Found at {ctx.base_url}/chat/completions; base_url is probably wrong: "
        "it should be the API root that serves /chat/completions and /models, e.g. "
        f"https://openrouter.ai/api/v1 or http://127.0.0.1:8000/v1{unversioned}",
        attempts=attempts,
    )


def unknown_model(
    ctx: CallContext, available: Sequence[str], attempts: int = 1
) -> UnknownModelError:
    close = difflib.get_close_matches(ctx.model, available, n=3, cutoff=0.4)
    if close:
        listed = f"closest of the {len(available)} listed: {', '.join(close)}"
    else:
        shown = sorted(available)[:8]
        more = f" (+{len(available) - len(shown)} more)" if len(available) > len(shown) else ""
        listed = f"available: {', '.join(shown)}{more}"
    return UnknownModelError(
        f"role {ctx.role}: model {ctx.model!r} is not served by {ctx.host}; {listed}; "
        f"fix the name in [models]",
        attempts=attempts,
    )


def models_not_listed(ctx: CallContext, status: int, attempts: int = 1) -> BaseUrlError:
    """/models answered 404/405: a wrong base_url, or an endpoint that lists no models."""
    return BaseUrlError(
        f"{ctx.host}: {status} at {ctx.base_url}/models; base_url is probably wrong (it should be "
        "the API root, e.g. https://openrouter.ai/api/v1), unless this endpoint does not list "
        "models: `ascent smoke` tells which",
        attempts=attempts,
    )


def no_choices(ctx: CallContext, body_error: object, attempts: int = 1) -> NoChoicesError:
    detail = ""
    if body_error:
        msg = body_error.get("message", body_error) if isinstance(body_error, dict) else body_error
        detail = f" (server: {redact(' '.join(str(msg).split()), ctx.secrets)[:200]})"
    return NoChoicesError(
        f"{ctx.who} at {ctx.host}: the answer has no choices{detail}; usually an upstream "
        f"provider error: retry later, or set [models.{ctx.role}] fallback",
        attempts=attempts,
    )


def not_an_api(ctx: CallContext, text: str, attempts: int = 1) -> BaseUrlError:
    kind = "a web page" if "<html" in text[:500].lower() else "plain text"
    return BaseUrlError(
        f"{ctx.who} at {ctx.host}: base_url {ctx.base_url} answered with {kind}, not JSON; "
        "point base_url at the API root (e.g. https://openrouter.ai/api/v1)",
        attempts=attempts,
    )


def _root_cause(exc: BaseException) -> str:
    seen = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(seen).split()) or type(seen).__name__
    return text[:160]
