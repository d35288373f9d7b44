"""Roles: which model, endpoint and key each API-served role uses, resolved from the config.

`[models]` names the roles (`<role>_model`); `[models.<role>]` overrides `[api]`'s base_url and
api_key_env and may name a fallback model (else `[models] fallback_model`, if set).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from ascent.config.api import ApiSection, ModelsSection
from ascent.errors import ConfigError

_VERSION = re.compile(r"^v\d+[a-z0-9]*$")
_ENDPOINT_SUFFIXES = ("/chat/completions", "/completions", "/models", "/embeddings")


def normalize_base_url(url: str) -> str:
    """The API root a client appends `/chat/completions` to.

    `.../api` and `.../api/v1` both give `.../api/v1`: a path with no version segment (`v1`,
    `v1beta`, ...) gets `/v1`; a doubled version (`/v1/v1`), a trailing slash and a pasted
    endpoint suffix (`/chat/completions`) are removed.
    """
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    for suffix in _ENDPOINT_SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)].rstrip("/")
    segments = [s for s in path.split("/") if s]
    while len(segments) >= 2 and _VERSION.match(segments[-1]) and segments[-1] == segments[-2]:
        segments.pop()
    if not any(_VERSION.match(s) for s in segments):
        segments.append("v1")
    return urlunsplit((parts.scheme, parts.netloc, "/" + "/".join(segments), "", ""))


@dataclass(frozen=True)
class RoleSpec:
    """One API-served role, fully resolved."""

    role: str
    model: str
    base_url: str  # normalised
    api_key_env: str
    fallback: str | None = None


def resolve_roles(api: ApiSection, models: ModelsSection) -> dict[str, RoleSpec]:
    """Every role named in `[models]`, with `[api]` defaults filled in; sorted by name."""
    out: dict[str, RoleSpec] = {}
    for role, (model, table) in models.roles().items():
        if not model:
            raise ConfigError(
                f'[models.{role}]: role {role} has no model; add {role}_model = "name" to [models]'
            )
        fallback = table.fallback or models.fallback_model
        out[role] = RoleSpec(
            role=role,
            model=model,
            base_url=normalize_base_url(table.base_url or api.base_url),
            api_key_env=api.api_key_env if table.api_key_env is None else table.api_key_env,
            fallback=fallback if fallback != model else None,
        )
    return out
