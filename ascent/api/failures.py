"""The failures of the API channel: one `ApiError` subclass each, so callers can tell them apart.

`ascent.api.diagnoses` decides which one an exception is and words its one-line message; it
re-exports these classes, so `diagnoses.UnknownModelError` and the names here are the same.
`model_level` marks a failure of the model rather than of the endpoint or key: the role's
fallback model may still answer.
"""

from __future__ import annotations

from ascent.errors import AscentError


class ApiError(AscentError):
    """A failure on the API channel; the message is one line with the fix."""

    #: A failure of the model (not of the endpoint or key): a fallback model may succeed.
    model_level = False

    def __init__(self, message: str, *, attempts: int = 1) -> None:
        super().__init__(" ".join(message.split()))
        self.attempts = attempts


class KeyMissingError(ApiError):
    """The key variable is unset or empty."""


class KeyLooksLikeNameError(ApiError):
    """The key variable holds a variable name (e.g. OPENAI_API_KEY) instead of a key."""


class AuthError(ApiError):
    """401/403: the endpoint refused the key."""


class BaseUrlError(ApiError):
    """404 (or a web page) where the API should be: base_url points at the wrong place."""


class UnknownModelError(ApiError):
    """The endpoint does not serve the model name."""

    model_level = True


class RateLimitedError(ApiError):
    """429 after every retry."""

    model_level = True


class ServerError(ApiError):
    """5xx, 408 or 409 after every retry: the endpoint's side keeps failing."""

    model_level = True


class RequestTimeoutError(ApiError):
    """No answer within timeout_sec, after every retry."""

    model_level = True


class ProxyError(ApiError):
    """The connection failed while a proxy variable routes the request."""


class UnreachableError(ApiError):
    """The connection failed (no proxy involved): wrong host/port or the server is down."""


class NoChoicesError(ApiError):
    """An answer without `choices` (often an upstream error wrapped in a 200)."""

    model_level = True


class MaxTokensError(ApiError):
    """max_tokens (plus the prompt) is over what the model accepts."""

    model_level = True


class BadResponseError(ApiError):
    """An answer that is not valid JSON (truncated or not an API at all)."""


class RequestRejectedError(ApiError):
    """Any other 4xx, with the server's own explanation."""


# Failures no retry or fallback can cure: a run or an evaluation stops on them at once, with
# their message, instead of scoring every later request as a failed answer.
FATAL_ERRORS: tuple[type[ApiError], ...] = (
    KeyMissingError,
    KeyLooksLikeNameError,
    AuthError,
    BaseUrlError,
    UnknownModelError,
    ProxyError,
    UnreachableError,
)
