"""`ascent smoke CONFIG`: one minimal request per configured role (and per fallback model);
for a classic PPO config, the log assistant's role.

Cheap by design: a one-line prompt and a small max_tokens. Each row says whether the role
answered, how fast, and the first line of the answer; a failing row carries the diagnosis.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

from ascent.api.client import ApiClient
from ascent.api.failures import ApiError
from ascent.doctor.checks import NO_ASSISTANT
from ascent.errors import ConfigError
from ascent.rules import ClassicConfig, LLMConfig

PROMPT = "Reply with the single word: ok"
SMOKE_MAX_TOKENS = 16  # room for "ok" from any tokenizer, little cost on a paid endpoint


@dataclass(frozen=True)
class SmokeRow:
    role: str
    model: str
    host: str
    ok: bool
    latency_sec: float | None
    answer: str  # first line of the answer, or the diagnosis class on failure
    error: ApiError | None = None


async def smoke_client(client: ApiClient, max_tokens: int = SMOKE_MAX_TOKENS) -> list[SmokeRow]:
    """Ask every role of `client` once, concurrently (within its concurrency limit)."""

    async def one(role: str) -> SmokeRow:
        spec = client.spec(role)
        host = spec.base_url.split("//", 1)[-1].split("/", 1)[0]
        try:
            # no temperature: reasoning models refuse any value but their default
            result = await client.chat(
                role, [{"role": "user", "content": PROMPT}], max_tokens=max_tokens
            )
        except ApiError as err:
            return SmokeRow(role, spec.model, host, False, None, type(err).__name__, err)
        first = next((line.strip() for line in result.text.splitlines() if line.strip()), "")
        if not first:
            first = f"(empty answer; finish_reason={result.finish_reason})"
        return SmokeRow(role, spec.model, host, True, result.latency_sec, first[:60])

    async with client:
        return list(await asyncio.gather(*(one(role) for role in client.roles)))


def smoke_roles(client: ApiClient) -> ApiClient:
    """The same client with fallbacks as roles of their own (`solver (fallback)`), none chained."""
    roles = {}
    for name, spec in client.roles.items():
        roles[name] = dataclasses.replace(spec, fallback=None)
        if spec.fallback:
            # keyed apart for the table; messages still say "role <name> (<fallback model>)"
            roles[f"{name} (fallback)"] = dataclasses.replace(
                spec, model=spec.fallback, fallback=None
            )
    return ApiClient(
        roles,
        keys=client.keys,
        policy=client.policy,
        concurrency=client.concurrency,
        usage=client.usage,
    )


def run_smoke(cfg: LLMConfig | ClassicConfig, max_tokens: int = SMOKE_MAX_TOKENS) -> list[SmokeRow]:
    """Send one minimal request per role the run calls (a classic PPO run: the log
    assistant's); never raises for a role failure."""
    if isinstance(cfg, ClassicConfig) and not cfg.assistant.enabled:
        raise ConfigError(
            f"{cfg.source}: {NO_ASSISTANT}, so there is nothing to smoke-test; enable it with "
            "[models] analyst_model and [assistant] enabled = true (examples/ppo_cartpole.toml)"
        )
    client = ApiClient.from_config(cfg)
    if not client.roles:
        raise ConfigError(
            f'{cfg.source}: no roles in [models]; name one, e.g. solver_model = "gpt-4o-mini" '
            "(see examples/api_roles.toml)"
        )
    return asyncio.run(smoke_client(smoke_roles(client), max_tokens))


def format_smoke(rows: list[SmokeRow]) -> list[str]:
    """A plain-text table (copies cleanly into an issue or a README), then one line per failure."""
    header = ("role", "model", "endpoint", "status", "latency", "answer")
    body = [
        (
            r.role,
            r.model,
            r.host,
            "ok" if r.ok else "FAILED",
            f"{r.latency_sec:.2f} s" if r.latency_sec is not None else "-",
            r.answer,
        )
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header) - 1)]
    lines = [
        "  ".join(str(cell).ljust(w) for cell, w in zip(row[:-1], widths, strict=True))
        + "  "
        + row[-1]
        for row in [header, *body]
    ]
    lines += [str(r.error) for r in rows if r.error is not None]
    return lines
