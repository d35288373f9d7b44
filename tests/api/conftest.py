from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from ascent.api import ApiClient, KeySource, RetryPolicy, RoleSpec
from tests.api.scripted_server import ScriptedServer
from tests.fake_secrets import FAKE_KEY

KEY = FAKE_KEY
KEY_VAR = "ASCENT_TEST_API_KEY"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def leaks(text: str, secret: str = KEY) -> list[str]:
    """Every 5-character piece of `secret` that appears in `text` (must be empty)."""
    return sorted({secret[i : i + 5] for i in range(len(secret) - 4) if secret[i : i + 5] in text})


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy and a known key variable, whatever the developer's shell has."""
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
        monkeypatch.delenv(var.lower(), raising=False)
    monkeypatch.setenv(KEY_VAR, KEY)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as srv:
        yield srv


@pytest.fixture
def api_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def make_client(
    base_url: str,
    *,
    model: str = "m",
    fallback: str | None = None,
    max_retries: int = 2,
    backoff_sec: float = 0.01,
    timeout_sec: float = 5.0,
    max_wait_sec: float = 5.0,
    concurrency: int = 4,
    keys: KeySource | None = None,
    key_var: str = KEY_VAR,
    append_v1: bool = True,
) -> ApiClient:
    from ascent.api.roles import normalize_base_url

    spec = RoleSpec("solver", model, normalize_base_url(base_url, append_v1), key_var, fallback)
    return ApiClient(
        {"solver": spec},
        keys=keys or KeySource(),
        policy=RetryPolicy(timeout_sec, max_retries, backoff_sec, max_wait_sec),
        concurrency=concurrency,
        seed=0,
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def chat_once(client: ApiClient, **kw: Any) -> Any:
    async with client:
        return await client.chat("solver", [{"role": "user", "content": "hi"}], **kw)
