"""Roles: which model, endpoint and key each API-served role uses, resolved from the config.

`[models]` names the roles (`<role>_model`); `[models.<role>]` overrides `[api]`'s base_url,
append_v1 and api_key_env and may name a fallback model (else `[models] fallback_model`, if
set). `[api] base_url_env` names a variable holding `[api]`'s root, looked up like a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from ascent.api.keys import KeySource
from ascent.config.api import VERSION_SEGMENT, ApiSection, ModelsSection
from ascent.errors import ConfigError
from ascent.rules.roles import named_roles
from ascent.secrets import check_base_url

_ENDPOINT_SUFFIXES = ("/chat/completions", "/completions", "/models", "/embeddings")


def normalize_base_url(url: str, append_v1: bool = True) -> str:
    """The API root a client appends `/chat/completions` to.

    A trailing slash, a pasted endpoint suffix (`/chat/completions`) and a doubled version
    (`/v1/v1`) are removed. With `append_v1` (`[api] append_v1`, on by default) a path with no
    version segment (`v1`, `v1beta`, ...) gets `/v1`, so `.../api` and `.../api/v1` both give
    `.../api/v1`; without it the path is kept, for roots that serve `/chat/completions`
    directly (https://api.perplexity.ai). A query string is refused: requests could not carry it.
    """
    try:
        check_base_url(url.strip(), "base_url")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    for suffix in _ENDPOINT_SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)].rstrip("/")
    segments = [s for s in path.split("/") if s]
    while (  # a doubled version, `/v1/v1`, is one
        len(segments) >= 2 and segments[-1] == segments[-2] and VERSION_SEGMENT.match(segments[-1])
    ):
        segments.pop()
    if append_v1 and not any(VERSION_SEGMENT.match(s) for s in segments):
        segments.append("v1")
    path = "/" + "/".join(segments) if segments else ""
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


@dataclass(frozen=True)
class RoleSpec:
    """One API-served role, fully resolved."""

    role: str
    model: str
    base_url: str  # normalised
    api_key_env: str
    fallback: str | None = None
    # The settings that bound this role's prompt and answer, named when a request is over the
    # model's context ("" = the generic max_tokens / [rollout] max_new_tokens).
    length_settings: str = ""


def api_base_url(api: ApiSection, keys: KeySource | None = None) -> str:
    """`[api]`'s API root: base_url, or the variable base_url_env names (the environment
    first, then the `.env` of `keys`), as written (not yet normalised)."""
    var = api.base_url_env
    if not var:
        return api.base_url
    keys = keys or KeySource()
    value = keys.lookup(var)
    env_hint = f" or add {var}=https://... to {keys.dotenv_path}" if keys.dotenv_path else ""
    if value is None or not value.strip():
        state = "is not set" if value is None else f"is empty (in the {keys.where(var)})"
        raise ConfigError(
            f"[api] base_url_env: variable {var} {state}; export {var}=<the API root, e.g. "
            f"https://openrouter.ai/api/v1>{env_hint}"
        )
    try:
        check_base_url(value.strip(), f"[api] base_url_env ({var})")
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return value.strip()


def resolve_roles(
    api: ApiSection, models: ModelsSection, keys: KeySource | None = None
) -> dict[str, RoleSpec]:
    """Every role named in `[models]`, with `[api]` defaults filled in; sorted by name.

    `keys` is where `[api] base_url_env` is looked up (default: the environment only); it is
    read only when some role uses `[api]`'s root."""
    out: dict[str, RoleSpec] = {}
    default_url: str | None = None
    for role, (model, table) in named_roles(models).items():
        if not model:
            raise ConfigError(
                f'[models.{role}]: role {role} has no model; add {role}_model = "name" to [models]'
            )
        fallback = table.fallback or models.fallback_model
        if table.base_url is None and default_url is None:
            default_url = api_base_url(api, keys)
        out[role] = RoleSpec(
            role=role,
            model=model,
            base_url=normalize_base_url(
                table.base_url or default_url or api.base_url,
                api.append_v1 if table.append_v1 is None else table.append_v1,
            ),
            api_key_env=api.api_key_env if table.api_key_env is None else table.api_key_env,
            fallback=fallback if fallback != model else None,
        )
    return out
