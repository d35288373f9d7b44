"""The OpenAI-compatible API channel: the client side, which rollouts, training and evaluation
all call, so it sits below them (serving a policy is ascent.serve; the checks behind `ascent
smoke` / `doctor` are ascent.doctor).

- `ApiClient` (client.py): async chat completions per role with retries, Retry-After,
  a concurrency limit, fallback models and token usage per role.
- `failures` / `diagnoses`: one `ApiError` subclass per failure users hit, and the one-line
  message that says what to do.
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
