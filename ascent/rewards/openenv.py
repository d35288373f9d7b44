"""OpenEnv environments (PyPI `openenv-core`, TRL's protocol) as a reward: the environment scores.

A problem from `[data] path = "openenv:..."` carries two columns: `oe_spec` (where the
environment is and how to talk to it, as JSON: plain data a checkpoint's replay buffer keeps)
and `oe_seed` (the seed its episode was reset with). To score a completion the reward opens a
session of its own on the environment's server, resets it with that seed (the same problem
again), sends the completion as the action, and takes the reward the environment returns: a
score here is the environment's own, given by its own rubric.

Sessions are openenv's WebSocket sessions (`/ws`), one environment instance per connection,
through openenv's own `GenericEnvClient`: the stateless HTTP /reset and /step build a fresh
environment per call, so they cannot play an episode. Episodes are single-turn: an environment
that is not done after one step stops the run with one line (multi-turn environments are the
agentic path's, not this one's).

Where the environment runs: `openenv:MODULE:APP` names an ASGI app (what openenv's
`create_app(...)` returns, conventionally `server.app:app`) that ascent serves with uvicorn on
a free loopback port, as a child process it stops at exit, once per process;
`openenv:http://HOST:PORT` is a server already running (a container, a Space, a cluster node).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError
from ascent.rewards.base import REWARDS, Scored, ScoredReward, column, completion_text
from ascent.runtime import BackgroundLoop, free_local_port

PREFIX = "openenv:"
EXTRA_HINT = "pip install 'ascent[openenv]' (or scripts/setup.sh --dev)"
# Columns the reward reads; an observation field of the same name would be shadowed.
RESERVED = ("prompt", "answer", "oe_spec", "oe_seed", "done", "reward", "metadata")
START_TIMEOUT_S = 180.0  # importing openenv's server side alone takes 5-10 s on 2 cores


def import_openenv_client() -> Any:
    """openenv's GenericEnvClient, or one line naming the extra that installs it."""
    try:
        from openenv.core.generic_client import GenericEnvClient
    except ImportError:
        raise AscentError(
            f"OpenEnv environments need the openenv-core package; {EXTRA_HINT}"
        ) from None
    return GenericEnvClient


@dataclass(frozen=True)
class EnvSpec:
    """What a problem's `oe_spec` column says: the environment and its action's text field."""

    target: str  # "MODULE:APP" to serve, or "http(s)://..." of a running server
    action_field: str
    sessions: int  # episodes played at once (the server's max_concurrent_envs bounds it)
    reset_options: str = "{}"  # JSON of the keyword arguments every reset gets beside the seed
    app_dir: str = ""  # where MODULE is imported from: the run's directory when it started

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EnvSpec:
        return cls(**json.loads(text))

    @property
    def served_here(self) -> bool:
        return not self.target.startswith(("http://", "https://"))


# No proxy: an http_proxy in the environment would send 127.0.0.1 to the proxy.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthy(url: str) -> bool:
    try:
        with _DIRECT.open(url + "/health", timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def action_fields(url: str) -> list[str] | None:
    """The fields of the environment's action, from its /schema (None: it has none to say)."""
    try:
        with _DIRECT.open(url.rstrip("/") + "/schema", timeout=30) as response:
            schema = json.loads(response.read())
        return sorted(schema["action"]["properties"])
    except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
        return None


class _Server:
    """An environment app served by uvicorn in a child process, on 127.0.0.1."""

    def __init__(self, target: str, app_dir: str) -> None:
        self.target = target
        port = str(free_local_port())
        self.url = f"http://127.0.0.1:{port}"
        # stderr to a file: a pipe nobody reads would block a chatty server
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop())
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                target,
                "--host",
                "127.0.0.1",
                "--port",
                port,
                "--log-level",
                "warning",
                "--app-dir",
                app_dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            # its own session: the terminal's Ctrl-C is the trainer's to handle (it finishes
            # the step, scoring included, and saves), not the environment's
            start_new_session=True,
        )
        try:
            self._wait_until_healthy()
        except BaseException:
            self.stop()
            raise

    def _wait_until_healthy(self) -> None:
        target = self.target
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(self.url):
            if self.process.poll() is not None:
                raise AscentError(
                    f"openenv:{target}: the environment server exited before it served "
                    f"({self.last_line()}); check that `uvicorn {target}` starts from this "
                    "directory"
                )
            if time.monotonic() > deadline:
                raise AscentError(
                    f"openenv:{target}: the environment server did not answer /health within "
                    f"{START_TIMEOUT_S:.0f} s ({self.last_line()})"
                )
            time.sleep(0.1)

    def last_line(self) -> str:
        if self._log.closed:
            return "its log is closed"
        self._log.seek(0)
        lines = [ln.strip() for ln in self._log.read().decode(errors="replace").splitlines()]
        lines = [ln for ln in lines if ln]
        return lines[-1][:300] if lines else "no output"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if not self._log.closed:
            self._log.close()


_servers: dict[str, _Server] = {}
_servers_lock = threading.Lock()


def server_url(spec: EnvSpec) -> str:
    """The URL the environment answers on: its own, or that of the child process serving it
    (started on first use, once per process)."""
    if not spec.served_here:
        return spec.target.rstrip("/")
    with _servers_lock:
        server = _servers.get(spec.target)
        if server is None:
            import_openenv_client()  # no openenv: say so before spawning a server that fails
            server = _servers[spec.target] = _Server(spec.target, spec.app_dir or os.getcwd())
        elif server.process.poll() is not None:  # its episodes' sessions died with it
            code, last = server.process.returncode, server.last_line()
            server.stop()
            raise AscentError(
                f"openenv:{spec.target}: the environment server stopped mid-run (exit code "
                f"{code}: {last}); fix what stopped it and resume from the last checkpoint"
            )
        return server.url


@atexit.register
def stop_servers() -> None:
    """Stop every environment server this process started."""
    with _servers_lock:
        for server in _servers.values():
            server.stop()
        _servers.clear()


@dataclass
class Episode:
    """One single-turn episode: the first observation, and the step's reward."""

    observation: dict[str, Any]
    reward: float | None = None
    done: bool = False


class _Sessions:
    """Open sessions to one server, reused episode after episode (a reset starts the next
    episode on the same environment instance): opening a WebSocket and building an
    environment per episode costs ~5 ms on 2 cores, a reused session's reset + step ~0.8 ms.
    Lives on `BackgroundLoop`'s loop; at most `size` sessions, made as episodes need them."""

    def __init__(self, client_class: Any, url: str, size: int) -> None:
        self.client_class, self.url, self.size = client_class, url, size
        self.idle: list[Any] = []
        self.made = 0
        self.freed = asyncio.Condition()

    async def _take(self) -> Any:
        async with self.freed:
            while not self.idle and self.made >= self.size:
                await self.freed.wait()
            if self.idle:
                return self.idle.pop()
            self.made += 1
        try:
            client = self.client_class(base_url=self.url)
            await client.connect()
        except BaseException:
            await self._drop()
            raise
        return client

    async def _give(self, client: Any) -> None:
        async with self.freed:
            self.idle.append(client)
            self.freed.notify()

    async def _drop(self) -> None:
        async with self.freed:
            self.made -= 1
            self.freed.notify()

    async def _discard(self, client: Any) -> None:
        await self._drop()
        with contextlib.suppress(Exception):
            await client.close()

    async def play(
        self, seed: int, action: dict[str, Any] | None, options: dict[str, Any]
    ) -> Episode:
        for attempt in (1, 2):
            client = await self._take()
            try:
                episode = await _play(client, seed, action, options)
            except Exception:
                await self._discard(client)
                if attempt == 2:
                    raise
                # Sessions idle since before the failure may be as dead as this one (a
                # server or proxy that closed idle sockets): the second try opens a new one.
                async with self.freed:
                    stale, self.idle = self.idle, []
                for old in stale:
                    await self._discard(old)
                continue
            await self._give(client)
            return episode
        raise AssertionError("unreachable")


async def _play(
    env: Any, seed: int, action: dict[str, Any] | None, options: dict[str, Any]
) -> Episode:
    first = await env.reset(seed=seed, **options)
    episode = Episode(dict(first.observation))
    if action is not None:
        result = await env.step(action)
        episode.reward = None if result.reward is None else float(result.reward)
        episode.done = bool(result.done)
    return episode


# One pool per server, sized by the first spec that reaches it (the run's config: its
# problems load first; a resumed run's replayed rows may carry an older `sessions`).
_sessions: dict[str, _Sessions] = {}  # touched only on BackgroundLoop's thread


def _one_line(text: str, limit: int = 240) -> str:
    return " ".join(text.split())[:limit]


def _failure(spec: EnvSpec, url: str, err: Exception) -> AscentError:
    """One line for an episode that failed, with what to change for what went wrong."""
    what = f"openenv:{spec.target}"
    said = _one_line(str(err))
    if isinstance(err, ConnectionError):
        return AscentError(
            f"{what}: cannot reach the environment at {url} ({said}); start its server or "
            "correct [data] path"
        )
    if "(code: CAPACITY_REACHED)" in said:
        return AscentError(
            f"{what}: the server holds fewer sessions than [data.openenv] sessions = "
            f"{spec.sessions}; lower it to the server's max_concurrent_envs"
        )
    if "(code: VALIDATION_ERROR)" in said:
        fields = action_fields(url)
        known = f" (its action's fields: {', '.join(fields)})" if fields else ""
        return AscentError(
            f"{what}: the server refused the action {{{spec.action_field!r}: completion}}; "
            f"set [data.openenv] action_field to the field that takes the text{known}"
        )
    if "(code: EXECUTION_ERROR)" in said:
        return AscentError(
            f"{what}: the environment raised during an episode ({said}); if it is reset's "
            f"doing, check [data.openenv] reset = {spec.reset_options}"
        )
    return AscentError(f"{what}: an episode failed ({type(err).__name__}: {said})")


def play(spec: EnvSpec, seeds: list[int], actions: list[dict[str, Any]] | None) -> list[Episode]:
    """One episode per seed, at most `spec.sessions` at a time: reset with the seed (and the
    spec's reset options) and, where `actions` is given, one step with that action."""
    client_class = import_openenv_client()
    url = server_url(spec)
    options = json.loads(spec.reset_options)

    async def everything() -> list[Episode]:
        if url not in _sessions:
            _sessions[url] = _Sessions(client_class, url, spec.sessions)
        sessions = _sessions[url]
        return list(
            await asyncio.gather(
                *(
                    sessions.play(seed, actions[i] if actions else None, options)
                    for i, seed in enumerate(seeds)
                )
            )
        )

    try:
        return BackgroundLoop.run(everything())
    except AscentError:
        raise
    except Exception as err:  # connection refused, a capacity error, a server-side exception
        raise _failure(spec, url, err) from None


class OpenEnvReward(ScoredReward):
    """`f(prompts, completions, oe_spec, oe_seed, **columns)`: the environment's reward for
    the completion as its action; `correct` means a reward of 1 or more."""

    def __init__(self) -> None:
        import_openenv_client()

    def score(self, prompts: list[Any], completions: list[Any], **columns: list[Any]) -> Scored:
        n = len(completions)
        specs = column(columns, "oe_spec", n, "openenv")
        seeds = column(columns, "oe_seed", n, "openenv")
        values: list[float | None] = [None] * n
        details: list[dict[str, Any]] = [{} for _ in range(n)]
        by_env: dict[str, list[int]] = {}
        for i, spec in enumerate(specs):
            if spec is not None:  # None: a problem of another [[data.sources]] source
                by_env.setdefault(spec, []).append(i)
        for text, rows in by_env.items():
            spec = EnvSpec.from_json(text)
            actions = [{spec.action_field: completion_text(completions[i])} for i in rows]
            episodes = play(spec, [int(seeds[i]) for i in rows], actions)
            for i, episode in zip(rows, episodes, strict=True):
                if not episode.done:
                    raise AscentError(
                        f"openenv:{spec.target}: the episode of seed {seeds[i]} did not end "
                        "after one step; ascent's openenv source plays single-turn "
                        "environments (a multi-turn one needs the agentic rollout)"
                    )
                if episode.reward is None:
                    raise AscentError(
                        f"openenv:{spec.target}: the episode of seed {seeds[i]} ended without "
                        "a reward; its step() must set the observation's reward"
                    )
                value = episode.reward
                values[i] = value
                details[i] = {"score": value, "correct": value >= 1.0, "outcome": "scored"}
        return Scored(values, details)


@REWARDS.register("openenv", columns=("oe_spec", "oe_seed"))
def build_openenv_reward(reward_cfg: RewardSection, sandbox_cfg: SandboxSection) -> OpenEnvReward:
    return OpenEnvReward()
