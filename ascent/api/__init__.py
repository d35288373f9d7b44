"""The OpenAI-compatible API channel: API-served roles, `ascent smoke` / `doctor` / `serve`.

- `ApiClient` (client.py): async chat completions per role with retries, Retry-After,
  a concurrency limit, fallback models and token usage per role.
- `failures` / `diagnoses`: one `ApiError` subclass per failure users hit, and the one-line
  message that says what to do.
- `smoke` / `doctor`: the checks behind `ascent smoke` and `ascent doctor`.
- `server`: `ascent serve`, a local policy behind an OpenAI-compatible endpoint.
- `assistant`: the log-analysis assistant that reads metrics during training.
"""

from ascent.api.client import ApiClient, ChatResult, RetryPolicy
from ascent.api.failures import ApiError
from ascent.api.keys import KeySource, Secret, redact
from ascent.api.roles import RoleSpec, normalize_base_url, resolve_roles
from ascent.api.usage import UsageLedger

__all__ = [
    "ApiClient",
    "ApiError",
    "ChatResult",
    "KeySource",
    "RetryPolicy",
    "RoleSpec",
    "Secret",
    "UsageLedger",
    "normalize_base_url",
    "redact",
    "resolve_roles",
]
