"""OpenEnv environments as problem and reward sources (`[data] path = "openenv:..."`).

Conformance: against a real openenv server on loopback (openenv's own create_app under
uvicorn, the way ascent serves it), the prompts are what the environment's reset(seed) gives
in this process, and the reward is what the environment's own rubric gives to the same
completion: right, wrong, in a sentence, empty. Also served from a URL, from a module in the
user's directory, and what is refused."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from ascent.config.data import DataSection
from ascent.config.rewards import RewardSection, SandboxSection
from ascent.data import load_task
from ascent.data.problems import render_prompt, reward_columns
from ascent.data.tasks import EVAL_SEED
from ascent.envs.openenv_addition import AdditionAction, AdditionEnv
from ascent.errors import AscentError
from ascent.rewards import REWARDS
from ascent.rewards.openenv import EnvSpec, _servers, _Sessions, server_url
from ascent.runtime import BackgroundLoop, free_local_port

ADDITION = "openenv:ascent.envs.openenv_addition:app"


def section(train_size: int = 60, eval_size: int = 20, **keys: object) -> DataSection:
    return DataSection(
        **{"path": ADDITION, "train_size": train_size, "eval_size": eval_size, **keys}
    )


def reward():
    return REWARDS.get("openenv")(RewardSection(functions=["openenv"]), SandboxSection())


def scores_in_process(seed: int, replies: list[str]) -> list[float]:
    """The environment's own rubric on the same problem, with no server between."""
    out = []
    for reply in replies:
        env = AdditionEnv()
        env.reset(seed=seed)
        out.append(env.step(AdditionAction(text=reply)).reward)
    return out


def test_prompts_are_the_environments_and_scores_are_its_rubrics():
    task = load_task(section(), seed=7)
    for problem in task.train[:10] + task.eval[:5]:
        seed = problem.columns["oe_seed"]
        assert problem.prompt == AdditionEnv().reset(seed=seed).prompt
    fn = reward()
    for problem in task.train[:6]:
        a, b = int(problem.columns["a"]), int(problem.columns["b"])
        assert problem.prompt == f"What is {a:02d} + {b:02d}?"
        replies = [str(a + b), f"{a} + {b} = {a + b}.", str(a + b + 1), "", "no idea", f"{a + b}0"]
        n = len(replies)
        columns = {k: v * n for k, v in reward_columns([problem]).items()}
        got = fn.score([problem.prompt] * n, replies, **columns)
        assert got.values == scores_in_process(problem.columns["oe_seed"], replies)
        assert got.values == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]  # the sum, by hand
        assert [d["correct"] for d in got.details] == [v == 1.0 for v in got.values]


def test_held_out_split_is_fixed_distinct_and_disjoint_from_every_seeds_training_set():
    a, b = load_task(section(80, 30), 1), load_task(section(80, 30), 2)
    assert [p.key for p in a.eval] == [p.key for p in b.eval]
    assert len({p.key for p in a.eval}) == len(a.eval) >= 15
    assert [p.key for p in a.train] != [p.key for p in b.train]
    for task in (a, b):
        assert not {p.key for p in task.train} & {p.key for p in task.eval}
    # the held-out seeds come from the fixed seed, whatever the run's
    import random

    rng = random.Random(EVAL_SEED)
    first = AdditionEnv().reset(seed=rng.randrange(2**31)).prompt
    assert a.eval[0].prompt == first


def test_observation_fields_fill_the_template_and_columns_survive_json():
    """A checkpoint's replay buffer keeps a problem's columns as JSON: they must come back
    the same, and score the same."""
    data = section(prompt_template="{a}+{b}=")
    problem = load_task(data, seed=0).train[0]
    shown = render_prompt(data.prompt_template, problem)
    a, b = problem.columns["a"], problem.columns["b"]
    assert shown == f"{a}+{b}=" and len(a) == len(b) == 2
    back = json.loads(json.dumps(problem.columns))
    assert back == problem.columns
    assert reward()(["q"], [str(int(a) + int(b))], **{k: [v] for k, v in back.items()}) == [1.0]


def test_reset_options_reach_every_reset_of_the_problems_and_of_the_reward():
    task = load_task(section(openenv={"reset": {"digits": 3}}), seed=5)
    for problem in task.train[:5]:
        seed = problem.columns["oe_seed"]
        assert problem.prompt == AdditionEnv().reset(seed=seed, digits=3).prompt
        assert len(problem.columns["a"]) == len(problem.columns["b"]) == 3
    problem = task.train[0]
    right = str(int(problem.columns["a"]) + int(problem.columns["b"]))
    columns = {k: v * 2 for k, v in reward_columns([problem]).items()}
    # scored on the 3-digit problem: against the default 2-digit one the sum would differ
    assert reward()(["q"] * 2, [right, "0"], **columns) == [1.0, 0.0]


def _pool_episodes(size: int, seeds: list[int], replies: list[str], stale: bool = False):
    """Episodes on a pool of `size` sessions of its own; with `stale`, every idle session is
    closed behind the pool's back first (as a server or proxy closing idle sockets would)."""
    from openenv.core.generic_client import GenericEnvClient

    url = server_url(EnvSpec(ADDITION.removeprefix("openenv:"), "text", 16))
    pool = _Sessions(GenericEnvClient, url, size)

    async def run():
        warm = [pool.play(seed, {"text": "0"}, {}) for seed in seeds[:size]]
        await asyncio.gather(*warm)
        if stale:
            for client in pool.idle:
                await client.close()
        return await asyncio.gather(
            *(pool.play(seed, {"text": r}, {}) for seed, r in zip(seeds, replies, strict=True))
        )

    return BackgroundLoop.run(run()), pool


def test_a_group_larger_than_the_session_pool_is_scored_in_order():
    """Sessions are reused across episodes: 40 episodes on 2 sessions, interleaved seeds and
    answers, each scored as its own episode, never more than 2 sessions open."""
    seeds = [s % 5 for s in range(40)]
    replies = []
    for i, seed in enumerate(seeds):
        a, b = AdditionEnv().reset(seed=seed).a, AdditionEnv().reset(seed=seed).b
        replies.append(str(int(a) + int(b) + (i % 2)))  # right on even rows, off by one on odd
    episodes, pool = _pool_episodes(2, seeds, replies)
    assert [e.reward for e in episodes] == [1.0 - (i % 2) for i in range(40)]
    assert all(e.done for e in episodes)
    assert pool.made == 2


def test_sessions_closed_while_idle_are_replaced_not_fatal():
    seeds = list(range(6))
    replies = [str(int(AdditionEnv().reset(seed=s).a) + int(AdditionEnv().reset(seed=s).b))
               for s in seeds]  # fmt: skip
    episodes, pool = _pool_episodes(3, seeds, replies, stale=True)
    assert [e.reward for e in episodes] == [1.0] * 6
    assert pool.made <= 3


def test_a_running_server_by_url_gives_the_same_problems_and_scores():
    """By URL, ascent starts nothing: it talks to the server there (here the one it started
    for MODULE:APP, whose URL a user would not know; a container's would do the same)."""
    url = server_url(EnvSpec(ADDITION.removeprefix("openenv:"), "text", 4))
    there = load_task(section(path=f"openenv:{url}"), seed=3)
    here = load_task(section(), seed=3)
    assert [p.prompt for p in there.train] == [p.prompt for p in here.train]
    problem = there.train[0]
    answer = str(int(problem.columns["a"]) + int(problem.columns["b"]))
    assert reward()(["q"], [answer], **reward_columns([problem])) == [1.0]
    assert json.loads(problem.columns["oe_spec"])["target"] == url


USER_ENV = '''
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class Say(Action):
    text: str


class Seen(Observation):
    question: str = ""
    mode: str = ""


class TwoTurns(Environment):
    """Asks for a number, and is not done after the first reply (or, reset with
    mode="no_reward", is done and gives no reward)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = State(step_count=0)
        self._mode = ""

    def reset(self, seed=None, episode_id=None, mode="two_turns"):
        self._mode = mode
        return Seen(question=f"say {seed}", mode=mode, done=False)

    def step(self, action, timeout_s=None, **kw):
        if self._mode == "no_reward":
            return Seen(question="thanks", done=True)
        return Seen(question="and again?", done=False, reward=0.5)

    @property
    def state(self):
        return self._state


app = create_app(TwoTurns, Say, Seen, env_name="two_turns", max_concurrent_envs=8)
'''


def test_a_users_environment_module_is_served_from_the_working_directory(tmp_path, monkeypatch):
    """MODULE:APP is imported from where ascent runs, as uvicorn would. This one names its
    prompt field `question`, does not end after one step, or ends without a reward, and then
    its server dies: each is told in one line."""
    (tmp_path / "two_turns_env.py").write_text(USER_ENV)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AscentError, match=r"no text field 'prompt' \(its fields: mode, question\)"):
        load_task(DataSection(path="openenv:two_turns_env:app", eval_size=4, train_size=8), 0)
    data = DataSection(
        path="openenv:two_turns_env:app", eval_size=4, train_size=8,
        openenv={"prompt_field": "question"},
    )  # fmt: skip
    task = load_task(data, seed=0)
    assert task.eval[0].prompt == f"say {task.eval[0].columns['oe_seed']}"
    columns = reward_columns(task.train[:1])
    with pytest.raises(AscentError, match="did not end after one step") as err:
        reward()(["q"], ["1"], **columns)
    assert "\n" not in str(err.value)

    data = data.model_copy(update={"openenv": data.openenv.model_copy(
        update={"reset": {"mode": "no_reward"}})})  # fmt: skip
    task = load_task(data, seed=0)
    assert task.train[0].columns["mode"] == "no_reward"  # the option reached reset()
    with pytest.raises(AscentError, match="ended without a reward; its step"):
        reward()(["q"], ["1"], **reward_columns(task.train[:1]))

    _servers["two_turns_env:app"].process.kill()
    _servers["two_turns_env:app"].process.wait()
    with pytest.raises(AscentError, match=r"server stopped mid-run \(exit code -9") as err:
        reward()(["q"], ["1"], **reward_columns(task.train[:1]))
    assert "\n" not in str(err.value)


def test_a_server_that_cannot_start_is_one_line_with_its_last_words(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AscentError, match="exited before it served") as err:
        load_task(DataSection(path="openenv:no_such_env_module:app", eval_size=4), 0)
    message = str(err.value)
    assert "\n" not in message
    assert 'Could not import module "no_such_env_module"' in message  # uvicorn's own words


def test_an_unreachable_url_is_one_line_saying_so():
    url = f"http://127.0.0.1:{free_local_port()}"
    with pytest.raises(AscentError, match=f"cannot reach the environment at {url}") as err:
        load_task(DataSection(path=f"openenv:{url}", eval_size=4), 0)
    assert "\n" not in str(err.value) and "correct [data] path" in str(err.value)


def test_an_action_field_the_action_lacks_is_refused_naming_its_fields():
    with pytest.raises(AscentError, match=r"has no field 'txt' \(its fields: .*text"):
        load_task(section(openenv={"action_field": "txt"}), 0)


def test_reset_options_that_change_nothing_are_warned_about(capsys):
    load_task(section(openenv={"reset": {"colour": "red"}}), 0)  # AdditionEnv takes **kwargs
    assert "changed nothing reset() shows for 4 seeds" in capsys.readouterr().err
    load_task(section(openenv={"reset": {"digits": 1}}), 0)
    assert "changed nothing" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"path": "openenv:"}, "names no environment"),
        ({"path": "openenv:just_a_module"}, "names no environment"),
        ({"eval_path": "x.jsonl"}, "makes both splits itself"),
        ({"columns": {"prompt": "q"}}, "makes both splits itself"),
        ({"path": "data.jsonl", "openenv": {"sessions": 4}}, "only an OpenEnv environment"),
        ({"openenv": {"sessions": 0}}, "greater than or equal to 1"),
        ({"openenv": {"reset": {"seed": 3}}}, "ascent sets it for every episode"),
    ],
)
def test_settings_an_environment_cannot_use_are_refused_at_load(keys, message):
    with pytest.raises(ValidationError, match=message):
        DataSection(**{"path": ADDITION, **keys})


def test_without_the_package_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openenv.core.generic_client", None)
    with pytest.raises(AscentError, match=r"pip install 'ascent\[openenv\]'"):
        reward()
    with pytest.raises(AscentError, match="need the openenv-core package"):
        load_task(section(), seed=0)


def test_the_example_recipe_loads():
    from ascent.configfile import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "examples" / "openenv_tiny.toml")
    assert cfg.data.openenv_target == "ascent.envs.openenv_addition:app"
    assert cfg.reward.functions == ["openenv"]
