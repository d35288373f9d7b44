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

import asyncio
import contextlib
import importlib
import inspect
import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ascent.config.rewards import RewardSection, SandboxSection
from ascent.errors import AscentError, did_you_mean
from ascent.rewards.base import REWARDS, Scored, ScoredReward, column, completion_text
from ascent.runtime import BackgroundLoop

EXTRA_HINT = "pip install 'ascent[verifiers]' (or scripts/setup.sh --dev)"
# The columns the reward reads; an info field of the same name would be shadowed.
RESERVED = ("prompt", "answer", "vf_spec", "vf_index", "chat_context")
# Any URL will do: init_state builds a client object it never calls (ascent generates).
_NO_CLIENT = "http://127.0.0.1:9/v1"
_NO_KEY_VAR = "ASCENT_VERIFIERS_NO_KEY"  # an unset variable: the client holds no key


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


# Environments and their rows, loaded once per process (a load imports the module and builds
# its datasets: seconds), on the caller's thread under one lock, never on the event loop.
_lock = threading.RLock()
_envs: dict[tuple[str, str, str], Any] = {}
_rows: dict[str, Any] = {}


def _import(env_id: str, cwd: str) -> Any:
    """The environment's module, found as python would from the directory the run started in
    (that directory on the path only for the import: a file there must not shadow a package
    for the rest of the run)."""
    module_name = env_id.replace("-", "_").split("/")[-1]
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ImportError as err:
        raise AscentError(
            f"verifiers:{env_id}: cannot import {module_name} ({err}); install the environment "
            f"(e.g. pip install -e path/to/{env_id}) or run from the directory that holds it"
        ) from None
    except Exception as err:  # a module that fails as it runs: a SyntaxError, a NameError
        raise AscentError(
            f"verifiers:{env_id}: importing {module_name} failed: {type(err).__name__}: {err}"
        ) from None
    finally:
        if added:
            sys.path.remove(cwd)


def _load(env_id: str, args: dict[str, Any], cwd: str) -> Any:
    vf = import_verifiers()
    from verifiers.utils.env_utils import load_environment

    module = _import(env_id, cwd)
    _check_args(module, env_id, args)
    try:
        with _quiet_datasets():
            env = load_environment(env_id, **args)  # verifiers' own loader: the module imported
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
    if env.dataset is None and getattr(env, "dataset_source", None) is None:
        raise AscentError(
            f"verifiers:{env_id} has only an eval dataset; ascent trains on an environment's "
            "dataset, so give its load_environment() one"
        )
    return env


def _call(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())


def environment(spec: str) -> Any:
    """The environment `spec` names, loaded once per process."""
    fields = json.loads(spec)
    key = (fields["env"], json.dumps(fields["args"], sort_keys=True), fields["cwd"])
    with _lock:
        if key not in _envs:
            _envs[key] = _load(fields["env"], fields["args"], fields["cwd"])
        return _envs[key]


def split_rows(spec: str) -> Any:
    """The rows (a datasets.Dataset, formatted by the environment) of `spec`'s split: the
    environment's eval dataset for "eval", else its train dataset."""
    with _lock:
        if spec not in _rows:
            fields = json.loads(spec)
            env = environment(spec)
            try:
                with _quiet_datasets():
                    split = fields["split"]
                    _rows[spec] = env.get_eval_dataset() if split == "eval" else env.get_dataset()
            except Exception as err:  # a dataset builder that fails, rows it cannot format
                raise AscentError(
                    f"verifiers:{fields['env']}: building its {fields['split']} dataset failed: "
                    f"{type(err).__name__}: {err} (rows need a prompt, or a question to make "
                    "one from)"
                ) from None
        return _rows[spec]


def row_answer(row: dict[str, Any]) -> str:
    """A row's answer as a problem holds it ("" for none)."""
    answer = row.get("answer")
    return "" if answer is None else str(answer)


def has_eval_split(spec: str) -> bool:
    env = environment(spec)
    return getattr(env, "eval_dataset_source", None) is not None or env.eval_dataset is not None


@dataclass
class _Group:
    """One problem's completions: the environment, the row they answer, their positions."""

    env: Any
    row: dict[str, Any]
    positions: list[int]
    where: str


class VerifiersReward(ScoredReward):
    """`f(prompts, completions, vf_spec, vf_index, **columns)`: the rubric's reward; correct
    when it reaches the environment's pass threshold."""

    def __init__(self) -> None:
        import_verifiers()

    def score(self, prompts: list[Any], completions: list[Any], **columns: list[Any]) -> Scored:
        n = len(completions)
        specs = column(columns, "vf_spec", n, "verifiers")
        indices = column(columns, "vf_index", n, "verifiers")
        answers = columns.get("answer") or [None] * n
        groups: dict[tuple[str, int], _Group] = {}
        for i, (spec, index) in enumerate(zip(specs, indices, strict=True)):
            if spec is None:  # a problem of another [[data.sources]] source: not ours to score
                continue
            key = (spec, int(index))
            if key not in groups:
                groups[key] = self._group(spec, int(index), answers[i])
            groups[key].positions.append(i)
        values: list[float | None] = [None] * n
        details: list[dict[str, Any]] = [{} for _ in range(n)]
        if not groups:
            return Scored(values, details)
        texts = [completion_text(c) for c in completions]
        states = BackgroundLoop.run(_score_groups(list(groups.values()), texts))
        for group in groups.values():
            threshold = float(getattr(group.env, "pass_threshold", 0.5))
            for i in group.positions:
                state = states[i]
                reward = float(state["reward"])
                values[i] = reward
                details[i] = {
                    "score": reward,
                    "correct": reward >= threshold,
                    "metrics": {k: float(v) for k, v in (state.get("metrics") or {}).items()},
                    "outcome": "scored" if state.get("error") is None else "error",
                }
        return Scored(values, details)

    @staticmethod
    def _group(spec: str, index: int, answer: Any) -> _Group:
        fields = json.loads(spec)
        where = f"verifiers:{fields['env']}"
        rows = split_rows(spec)
        row = rows[index] if 0 <= index < len(rows) else None
        # a checkpoint's replayed rows point into the dataset by position: it must not move
        if row is None or (answer is not None and row_answer(row) != str(answer)):
            raise AscentError(
                f"{where}: row {index} of its {fields['split']} dataset is not the problem this "
                "batch holds (its answer differs); the environment built its rows in another "
                "order in this process: make its dataset deterministic (seeded)"
            )
        return _Group(environment(spec), row, [], where)

    def close(self) -> None:
        """Tear the loaded environments' rubrics down (a rubric may hold a process pool or
        a judge's client) and forget them; a later reward loads them afresh."""
        with _lock:
            envs = list(_envs.values())
            _envs.clear()
            _rows.clear()
        for env in envs:
            with contextlib.suppress(Exception):
                BackgroundLoop.run(env.rubric.teardown())


async def _score_groups(groups: list[_Group], texts: list[str]) -> dict[int, Any]:
    """Each problem's completions scored as one group by its environment's rubric, the
    groups at once (a judge rubric waits on its client)."""
    states: dict[int, Any] = {}
    scored = await asyncio.gather(*(_score_group(g, texts) for g in groups))
    for group, group_states in zip(groups, scored, strict=True):
        states.update(zip(group.positions, group_states, strict=True))
    return states


async def _score_group(group: _Group, texts: list[str]) -> list[Any]:
    """What verifiers does for a group of single-turn rollouts, with ascent's replies as the
    model's: each state made by init_state and the environment's setup_state, the reply added
    as the one turn (add_trajectory_step), the stop checked (is_completed: the turn limit),
    the rollout finalised (the environment's cleanup, which renders the completion), then
    the group scored (score_group) and each state handed to the rubric's cleanup."""
    import verifiers as vf
    from verifiers.utils.message_utils import normalize_messages

    env = group.env
    states = []
    try:
        for i in group.positions:
            state = await env.init_state(group.row, _client(), "ascent", {})
            try:
                await env.setup_state(state)
            except vf.Error as err:
                state["error"] = err
            reply = normalize_messages(
                [{"role": "assistant", "content": texts[i]}], field_name="completion"
            )
            step = {
                "prompt": state["prompt"],
                "completion": reply,
                "response": None,  # no response object or token ids: ascent's engine has them
                "tokens": None,
                "reward": None,
                "advantage": None,
                "is_truncated": False,  # ascent does not tell rewards where a reply was cut
                "trajectory_id": state["trajectory_id"],
                "extras": {},
            }
            await env.add_trajectory_step(state, step)
            await env.is_completed(state)
            await env.cleanup(state)
            states.append(state)
        await env.rubric.score_group(states)
        for state in states:
            await env.rubric.cleanup(state)
    except AscentError:
        raise
    except Exception as err:
        raise AscentError(
            f"{group.where}: scoring failed in the environment: {type(err).__name__}: {err}"
        ) from None
    return states


@lru_cache(maxsize=1)
def _client() -> Any:
    """The client object init_state stores in each state, made once: ascent never calls it,
    and building one per state (an SSL context each) took 26 ms, 3.3 s a batch of 128. It
    reads no key: a Prime key in the environment stays where it is."""
    from verifiers.clients import resolve_client
    from verifiers.types import ClientConfig

    return resolve_client(ClientConfig(api_base_url=_NO_CLIENT, api_key_var=_NO_KEY_VAR))


@REWARDS.register("verifiers", columns=("vf_spec", "vf_index"))
def build_verifiers_reward(
    reward_cfg: RewardSection, sandbox_cfg: SandboxSection
) -> VerifiersReward:
    return VerifiersReward()
