"""verifiers environments (prime-rl's) as a reward: each completion is scored by the
environment's own rubric.

A verifiers environment is a Python module with `load_environment(**args)` returning a
`vf.Environment`: its dataset (rows with a chat `prompt`, an `answer`, an `info` dict) and a
rubric, a weighted sum of reward functions that read the prompt, completion, answer, info and
state. A problem from one (`[data] path = "verifiers:ENV_ID"`) carries two columns, `vf_spec`
(the module, the arguments it was loaded with, the split and the directory the run started
in, as JSON) and `vf_index` (the row's position in that split). The reward loads the same
environment once per process, builds each rollout's state with the environment's own
`init_state` from that exact row, completes it as a finished one-turn rollout whose reply is
the completion (one assistant message; no token ids or response object, which ascent's
engine keeps), and asks the rubric to score each problem's completions as one group
(`score_group`, as verifiers does after a group of rollouts), so group reward functions see
the whole group and a score here is the score verifiers gives. A completion counts as
correct when its reward reaches the environment's `pass_threshold` (verifiers' own rule).

Single-turn environments only (`vf.SingleTurnEnv`): a multi-turn one answers each reply,
which ascent's rollouts do not ask for. The rubric runs in the trainer's process, as the
user's own reward code does; environments that execute model-written code (PythonEnv,
SandboxEnv) are multi-turn and refused.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError, did_you_mean
from ascent.rewards.base import REWARDS, Scored, ScoredReward, column, completion_text
from ascent.runtime import BackgroundLoop

PREFIX = "verifiers:"
EXTRA_HINT = "pip install 'ascent[verifiers]' (or scripts/setup.sh --dev)"
# The columns the reward reads; an info field of the same name would be shadowed.
RESERVED = ("prompt", "answer", "vf_spec", "vf_index", "chat_context")
# Any URL will do: init_state builds a client object it never calls (ascent generates).
_NO_CLIENT = "http://127.0.0.1:9/v1"


def import_verifiers() -> Any:
    """The verifiers package, or one line naming the extra that installs it."""
    try:
        import verifiers
    except ImportError:
        raise AscentError(
            f"verifiers environments need the verifiers package; {EXTRA_HINT}"
        ) from None
    return verifiers


def env_spec(env_id: str, args: dict[str, Any], split: str, cwd: str) -> str:
    """The JSON naming one split of one loaded environment: what `environment` loads."""
    return json.dumps({"env": env_id, "args": args, "split": split, "cwd": cwd}, sort_keys=True)


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """An environment builds its rows with datasets' map, which draws a progress bar per
    split: noise in a trainer's log."""
    try:
        from datasets.utils import logging as ds_logging
    except ImportError:  # pragma: no cover - verifiers depends on datasets
        yield
        return
    was = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            ds_logging.enable_progress_bar()


def _check_args(module: Any, env_id: str, args: dict[str, Any]) -> None:
    """Arguments load_environment does not take are one line naming the ones it does."""
    load = getattr(module, "load_environment", None)
    if not callable(load):
        raise AscentError(
            f"verifiers:{env_id}: the module has no load_environment(); name a verifiers "
            "environment module (one made with `vf-init` or shaped like it)"
        )
    params = inspect.signature(load).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    taken = sorted(params)
    unknown = sorted(set(args) - set(taken))
    if unknown:
        raise AscentError(
            f"verifiers:{env_id}'s load_environment() takes no {', '.join(unknown)}"
            f"{did_you_mean(unknown[0], taken)}; it takes: {', '.join(taken) or 'nothing'} "
            "(change [data] verifiers)"
        )


@lru_cache(maxsize=16)
def _load(env_id: str, args_json: str, cwd: str) -> Any:
    vf = import_verifiers()
    from verifiers.utils.env_utils import load_environment

    if cwd not in sys.path:  # a user's environment module beside their config, as python finds it
        sys.path.insert(0, cwd)
    module_name = env_id.replace("-", "_").split("/")[-1]
    try:
        module = __import__(module_name, fromlist=["load_environment"])
    except ImportError as err:
        raise AscentError(
            f"verifiers:{env_id}: cannot import {module_name} ({err}); install the environment "
            f"(e.g. pip install -e path/to/{env_id}) or run from the directory that holds it"
        ) from None
    args = json.loads(args_json)
    _check_args(module, env_id, args)
    try:
        with _quiet_datasets():
            env = load_environment(env_id, **args)
    except AscentError:
        raise
    except Exception as err:
        raise AscentError(
            f"verifiers:{env_id}: load_environment({_call(args)}) failed: "
            f"{type(err).__name__}: {err}"
        ) from None
    if not isinstance(env, vf.SingleTurnEnv):
        raise AscentError(
            f"verifiers:{env_id} is a {type(env).__name__}, a multi-turn environment; ascent "
            "trains on single-turn ones (vf.SingleTurnEnv) so far"
        )
    return env


def _call(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())


def environment(spec: str) -> Any:
    """The environment `spec` names, loaded once per process."""
    fields = json.loads(spec)
    return _load(fields["env"], json.dumps(fields["args"], sort_keys=True), fields["cwd"])


@lru_cache(maxsize=32)
def split_rows(spec: str) -> Any:
    """The rows (a datasets.Dataset, formatted by the environment) of `spec`'s split: the
    environment's eval dataset for "eval" (its train dataset when it has none, as verifiers
    does), else its train dataset."""
    env = environment(spec)
    with _quiet_datasets():
        if json.loads(spec)["split"] == "eval":
            return env.get_eval_dataset()
        return env.get_dataset()


def has_eval_split(spec: str) -> bool:
    env = environment(spec)
    return getattr(env, "eval_dataset_source", None) is not None or env.eval_dataset is not None


class VerifiersReward(ScoredReward):
    """`f(prompts, completions, vf_spec, vf_index, **columns)`: the rubric's reward; correct
    when it reaches the environment's pass threshold."""

    def __init__(self) -> None:
        import_verifiers()

    def score(self, prompts: list[Any], completions: list[Any], **columns: list[Any]) -> Scored:
        n = len(completions)
        specs = column(columns, "vf_spec", n, "verifiers")
        indices = column(columns, "vf_index", n, "verifiers")
        groups: dict[tuple[str, int], list[int]] = {}
        for i, spec in enumerate(specs):
            if spec is not None:  # None: a problem of another [[data.sources]] source
                groups.setdefault((spec, int(indices[i])), []).append(i)
        values: list[float | None] = [None] * n
        details: list[dict[str, Any]] = [{} for _ in range(n)]
        if not groups:
            return Scored(values, details)
        states = BackgroundLoop.run(_score_groups(groups, completions))
        for (spec, _), rows in groups.items():
            threshold = float(getattr(environment(spec), "pass_threshold", 0.5))
            for i in rows:
                state = states[i]
                reward = float(state["reward"])
                values[i] = reward
                metrics = {k: float(v) for k, v in (state.get("metrics") or {}).items()}
                details[i] = {
                    "score": reward,
                    "correct": reward >= threshold,
                    "metrics": metrics,
                    "outcome": "scored" if state.get("error") is None else "error",
                }
        return Scored(values, details)


@lru_cache(maxsize=1)
def _client() -> Any:
    """The client object init_state stores in each state, made once: ascent never calls it,
    and building one per state (an SSL context each) took 26 ms, 3.3 s a batch of 128."""
    from verifiers.clients import resolve_client
    from verifiers.types import ClientConfig

    return resolve_client(ClientConfig(api_base_url=_NO_CLIENT))


async def _score_groups(
    groups: dict[tuple[str, int], list[int]], completions: list[Any]
) -> dict[int, Any]:
    """Each problem's completions scored as one group by its environment's rubric."""
    from verifiers.utils.message_utils import normalize_messages

    client = _client()
    states: dict[int, Any] = {}
    for (spec, index), rows in groups.items():
        env = environment(spec)
        row = split_rows(spec)[index]
        group = []
        for i in rows:
            state = await env.init_state(row, client, "ascent", {})
            text = completion_text(completions[i])
            if isinstance(state.get("prompt"), str):
                completion: Any = text
            else:
                reply = [{"role": "assistant", "content": text}]
                completion = normalize_messages(reply, field_name="completion")
            # what a finished single-turn rollout holds: one turn, its reply the completion
            state["trajectory"].append(
                {
                    "prompt": state["prompt"],
                    "completion": completion,
                    "response": None,
                    "tokens": None,
                    "reward": None,
                    "advantage": None,
                    "is_truncated": False,
                    "trajectory_id": state["trajectory_id"],
                    "extras": {},
                }
            )
            state["completion"] = completion
            state["is_completed"] = True
            group.append(state)
            states[i] = state
        try:
            await env.rubric.score_group(group)
        except Exception as err:
            raise AscentError(
                f"verifiers:{json.loads(spec)['env']}: its rubric failed to score: "
                f"{type(err).__name__}: {err}"
            ) from None
        for state in group:
            await env.rubric.cleanup(state)
    return states


@REWARDS.register("verifiers", columns=("vf_spec", "vf_index"))
def build_verifiers_reward(
    reward_cfg: RewardSection, sandbox_cfg: SandboxSection
) -> VerifiersReward:
    return VerifiersReward()
