"""Config sections for the OpenAI-compatible API channel: `[api]`, `[models]`, `[assistant]`.

The layout is the one the write-ups use, so their snippets load as written:

    [api]
    base_url = "https://openrouter.ai/api/v1"
    api_key_env = "OPENROUTER_API_KEY"   # the NAME of the variable; the key lives in it or in .env
    timeout_sec = 120
    max_retries = 3

    [models]
    hypothesis_model = "deepseek/deepseek-r1"
    solver_model = "qwen/qwen-2.5-coder-32b-instruct"

    [models.solver]                      # optional per-role overrides
    api_key_env = "SOLVER_API_KEY"
    fallback = "meta-llama/llama-3.3-70b-instruct"

`base_url_env = "NAME"` reads the root from that variable (or the `.env` beside the config,
as keys are), instead of base_url, so that both URL and key can live in `.env`.

A base_url without a version segment gets `/v1` (so `.../api` works); a root that serves
`/chat/completions` itself (https://api.perplexity.ai) needs `append_v1 = false`, in `[api]`
or the role's table. Any `<role>_model` key names a role. A key pasted where a variable name
belongs is refused with only its first 4 characters shown (inputs are hidden from validation
errors too).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from ascent.config.base import Section
from ascent.secrets import ENV_NAME, check_base_url, check_key_env_name, guard_pasted_key

ROLE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
VERSION_SEGMENT = re.compile(r"^v\d+[a-z0-9]*$")  # of an API path: v1, v1beta
MODEL_SUFFIX = "_model"


class ApiSection(Section):
    """`[api]`: the default OpenAI-compatible endpoint for API-served roles."""

    model_config = ConfigDict(hide_input_in_errors=True)

    base_url: str = Field(
        "https://api.openai.com/v1",
        description="API root; `.../api` and `.../api/v1` both work (see append_v1). No ?query.",
    )
    append_v1: bool = Field(
        True,
        description="Add /v1 to a base_url with no version segment; false for a version-less "
        "root such as https://api.perplexity.ai.",
    )
    base_url_env: str = Field(
        "",
        description="NAME of the variable (or .env entry) holding the API root, read instead "
        "of base_url (the two are exclusive); '' = use base_url.",
    )
    api_key_env: str = Field(
        "OPENAI_API_KEY",
        description="NAME of the variable (or .env entry) holding the key; '' = no key needed.",
    )
    env_file: str = Field(
        ".env",
        description="KEY=value file beside the config read for keys (environment wins); '' = none.",
    )
    timeout_sec: float = Field(120.0, gt=0.0, description="Seconds to wait for one answer.")
    max_retries: int = Field(
        3,
        ge=0,
        description="Retries after a 429, 5xx, timeout, dropped connection or empty answer.",
    )
    backoff_sec: float = Field(
        1.0, ge=0.0, description="First retry wait; doubles each retry, with ±25% jitter."
    )
    max_wait_sec: float = Field(
        60.0, ge=0.0, description="Longest single wait between retries (caps Retry-After too)."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_pasted_key(cls, data: Any) -> Any:
        guard_pasted_key(data, "[api]")
        return data

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_base_url(value, "[api]")

    @field_validator("api_key_env")
    @classmethod
    def _key_env(cls, value: str) -> str:
        return check_key_env_name(value, "[api]")

    @field_validator("base_url_env")
    @classmethod
    def _url_env(cls, value: str) -> str:
        if value and re.match(r"^\w+://", value):
            raise ValueError(
                "[api] base_url_env holds a URL, not a variable name; write the URL as "
                "base_url, or put it in a variable (or .env) and write its NAME here"
            )
        if value and not ENV_NAME.match(value):
            raise ValueError(
                f"[api] base_url_env: {value!r} is not an environment variable name (letters, "
                'digits and _, not starting with a digit), e.g. base_url_env = "OPENAI_BASE_URL"'
            )
        return value

    @model_validator(mode="after")
    def _one_base_url(self) -> ApiSection:
        if self.base_url_env and self.explicitly_set("base_url"):
            raise ValueError(
                f"[api] base_url_env: base_url is set too; keep one of the two (base_url_env "
                f"reads the URL from {self.base_url_env})"
            )
        return self


class RoleSection(Section):
    """`[models.<role>]`: per-role overrides of the `[api]` endpoint, and a fallback model."""

    model_config = ConfigDict(hide_input_in_errors=True)

    model: str | None = Field(None, description="Model name (same as `<role>_model` in [models]).")
    base_url: str | None = Field(None, description="Endpoint for this role; unset: [api] base_url.")
    append_v1: bool | None = Field(
        None, description="Add /v1 to this role's base_url if unversioned; unset: [api]'s."
    )
    api_key_env: str | None = Field(
        None, description="Key variable for this role (a separate rate limit); unset: [api]'s."
    )
    fallback: str | None = Field(
        None, description="Model used when the primary still fails after its retries."
    )


_ROLE_TABLE_KEYS = ", ".join(RoleSection.model_fields)


def _role_table(role: str, value: Any) -> RoleSection:
    where = f"[models.{role}]"
    if isinstance(value, RoleSection):
        return value
    if not isinstance(value, dict):
        raise ValueError(
            f"[models] {role}: expected a table of overrides ({_ROLE_TABLE_KEYS}) or a model "
            f'name as {role}{MODEL_SUFFIX} = "name"'
        )
    for key, item in value.items():
        if key not in RoleSection.model_fields:
            raise ValueError(f"{where}: unknown key '{key}'; valid keys: {_ROLE_TABLE_KEYS}")
        kind = bool if key == "append_v1" else str
        if item is not None and not isinstance(item, kind):
            raise ValueError(
                f"{where} {key}: must be {'true or false' if kind is bool else 'a string'}"
            )
        if key == "api_key_env" and item is not None:  # None: a stage's copy of an unset key
            check_key_env_name(item, where)
        if key == "base_url" and item is not None:
            check_base_url(item, where)
    try:
        return RoleSection.model_validate(value)
    except ValidationError as err:  # pragma: no cover - every key was checked above
        raise ValueError(f"{where}: {err.errors(include_url=False)[0]['msg']}") from None


class ModelsSection(Section):
    """`[models]`: a model per role (`<role>_model = "name"`); `[models.<role>]` overrides.

    Any `<role>_model` key names a role. A `[models.<role>]` table may set `model`, `base_url`,
    `append_v1`, `api_key_env` and `fallback` for that role; unset keys come from `[api]`.
    """

    model_config = ConfigDict(extra="allow", hide_input_in_errors=True)
    __pydantic_extra__: dict[str, Any] = Field(init=False)
    doc_tables: ClassVar[dict[str, type[Section]]] = {"<role>": RoleSection}

    hypothesis_model: str | None = Field(None, description="Proposes the approach (agentic GRPO).")
    solver_model: str | None = Field(None, description="Writes the program or the answer.")
    testgen_model: str | None = Field(None, description="Generates adversarial tests.")
    summarizer_model: str | None = Field(None, description="Compresses long transcripts.")
    analyst_model: str | None = Field(None, description="Answers the log assistant ([assistant]).")
    fallback_model: str | None = Field(
        None, description="Fallback for every role without its own `fallback` (not a role)."
    )

    @model_validator(mode="before")
    @classmethod
    def _roles(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for key, value in data.items():
            guard_pasted_key(value, f"[models.{key}]")
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key in cls.model_fields:
                if value is not None and not isinstance(value, str):
                    raise ValueError(
                        f'[models] {key}: must be a model name string, e.g. "gpt-4o-mini"'
                    )
                out[key] = value
            elif key.endswith(MODEL_SUFFIX) and ROLE_NAME.match(key):
                if not isinstance(value, str) or not value.strip():
                    raise ValueError(
                        f'[models] {key}: must be a model name string, e.g. "gpt-4o-mini"'
                    )
                out[key] = value
            elif ROLE_NAME.match(key) and isinstance(value, (dict, RoleSection)):
                out[key] = _role_table(key, value)
            else:
                raise ValueError(
                    f"[models] unknown key '{key}': name a role's model as "
                    f'<role>_model = "name" (e.g. solver_model) or override a role in a '
                    f"[models.<role>] table ({_ROLE_TABLE_KEYS})"
                )
        for key, value in out.items():
            if isinstance(value, RoleSection) and value.model and out.get(key + MODEL_SUFFIX):
                raise ValueError(
                    f"[models.{key}] model: {key}{MODEL_SUFFIX} already names this role's "
                    "model; keep one of the two"
                )
        return out


class AssistantSection(Section):
    """`[assistant]`: optional log analysis, three sentences every log_interval steps."""

    enabled: bool = Field(False, description="Send the latest metrics to an API role for analysis.")
    role: str = Field(
        "analyst", description="Role that answers; its model is `<role>_model` in [models]."
    )
    log_interval: int = Field(50, ge=1, description="Ask every N training steps.")
    history: int = Field(5, ge=1, description="How many recent metric records to send.")
    timeout_sec: float = Field(
        60.0, gt=0.0, description="Give up on one analysis after this long (training never waits)."
    )
    max_tokens: int = Field(200, ge=16, description="Longest answer, in tokens.")

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        if not ROLE_NAME.match(value):
            raise ValueError(
                f"[assistant] role: {value!r} is not a role name (lowercase letters, digits, _)"
            )
        return value
