"""verifiers environments as problem and reward sources (`[data] path = "verifiers:ENV_ID"`).

Conformance: the prompts are the rows the environment itself formats (its system prompt
included), and the scores are the ones verifiers gives: the environment's own `evaluate`
runs its rollouts against ascent's OpenAI-compatible server on loopback (the tiny model,
sampled), and ascent's reward scores the same replies to the same problems. Also: a user's
environment from the working directory with a group reward function, and what is refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from ascent.config.data import DataSection
from ascent.config.rewards import RewardSection, SandboxSection
from ascent.data import PromptFormatter, load_task
from ascent.data.problems import CHAT_CONTEXT, reward_columns
from ascent.errors import AscentError, ConfigError
from ascent.models import build_char_tokenizer
from ascent.rewards import REWARDS

vf = pytest.importorskip("verifiers")
from verifiers.types import ClientConfig  # noqa: E402
from verifiers.utils.env_utils import load_environment  # noqa: E402

ADDITION = "ascent.envs.verifiers_addition"


def section(eval_size: int = 20, **keys: object) -> DataSection:
    return DataSection(**{"path": f"verifiers:{ADDITION}", "eval_size": eval_size, **keys})


def reward():
    return REWARDS.get("verifiers")(RewardSection(functions=["verifiers"]), SandboxSection())


def plain(messages) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def test_prompts_are_the_rows_the_environment_formats():
    args = {"num_train": 300, "num_eval": 50, "system_prompt": "Reply with a number."}
    task = load_task(section(verifiers=args), seed=7)
    env = load_environment(ADDITION, **args)  # verifiers' own loading, apart from ascent's
    rows = {"train": env.get_dataset(), "eval": env.get_eval_dataset()}
    assert len(task.eval) == 20
    for problem, split in [(p, "train") for p in task.train[:10]] + [
        (p, "eval") for p in task.eval[:10]
    ]:
        assert json.loads(problem.columns["vf_spec"])["split"] == split
        row = rows[split][problem.columns["vf_index"]]
        conversation = [*problem.columns[CHAT_CONTEXT], {"role": "user", "content": problem.prompt}]
        assert conversation == plain(row["prompt"])
        assert problem.answer == row["answer"]
        assert (problem.columns["a"], problem.columns["b"]) == (row["info"]["a"], row["info"]["b"])
    # the held-out split is the environment's eval set, fixed whatever the run's seed, and no
    # training problem asks a held-out question
    other = load_task(section(verifiers=args), seed=8)
    assert [p.key for p in other.eval] == [p.key for p in task.eval]
    assert [p.key for p in other.train] != [p.key for p in task.train]
    assert not {p.key for p in task.train} & {p.key for p in task.eval}
    # the policy reads the environment's conversation: through a chat template, or plain
    tokenizer = build_char_tokenizer()
    problem = task.train[0]
    assert PromptFormatter("{prompt}", tokenizer, chat=False).text(problem) == (
        f"Reply with a number.\n{problem.prompt}"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}[{{ m['role'] }}:{{ m['content'] }}]{% endfor %}"
    )
    assert PromptFormatter("{a}+{b}=", tokenizer, chat=True).text(problem) == (
        f"[system:Reply with a number.][user:{problem.columns['a']}+{problem.columns['b']}=]"
    )


def test_scores_are_the_ones_verifiers_gives_its_own_rollouts(monkeypatch):
    """verifiers' evaluate() samples replies from ascent's server and scores them with the
    environment's rubric; ascent's reward scores the same replies to the same problems."""
    from ascent.serve.local_policy import LocalPolicy
    from ascent.serve.server import PolicyServer

    monkeypatch.setenv("ASCENT_VF_TEST_KEY", "unused")
    args = {"num_eval": 40, "question": "{a}+{b}="}  # the form the tiny model reads
    env = load_environment(ADDITION, **args)
    policy = LocalPolicy.load("ascent:tiny-arithmetic", device="cpu")
    with PolicyServer(policy, port=0, window_sec=0.05) as server:
        client = ClientConfig(api_base_url=server.url, api_key_var="ASCENT_VF_TEST_KEY")
        out = env.evaluate_sync(
            client,
            "ascent:tiny-arithmetic",
            sampling_args={"temperature": 1.0, "max_tokens": 6},
            num_examples=40,
            rollouts_per_example=4,
        )["outputs"]
    theirs = [o["reward"] for o in out]
    assert 0.0 in theirs and 1.0 in theirs, "the sample must hold right and wrong replies"
    held = {p.columns["vf_index"]: p for p in load_task(section(40, verifiers=args), 0).eval}
    problems = [held[o["example_id"]] for o in out]
    replies = [o["completion"][-1].content for o in out]
    scored = reward().score(["q"] * len(out), replies, **reward_columns(problems))
    assert scored.values == theirs
    for detail, output in zip(scored.details, out, strict=True):
        assert detail["metrics"] == output["metrics"]  # num_turns too: one finished turn
        assert detail["correct"] == (output["reward"] >= env.pass_threshold)


USER_ENV = '''
import verifiers as vf
from datasets import Dataset


class Asks(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "and again?"}]


def load_environment(size: int = 12, multi_turn: bool = False, sampling_args=None):
    rows = [{"question": f"say {i}", "answer": str(i)} for i in range(size)]

    def exact(completion, answer):
        return float(completion[-1]["content"].strip() == answer)

    def agreement(completions) -> list[float]:
        """Group reward: the share of the group giving the same reply."""
        replies = [c[-1]["content"] for c in completions]
        return [replies.count(r) / len(replies) for r in replies]

    rubric = vf.Rubric(funcs=[exact, agreement], weights=[1.0, 0.5])
    if multi_turn:
        return Asks(dataset=Dataset.from_list(rows), rubric=rubric, max_turns=3)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows), rubric=rubric, sampling_args=sampling_args
    )
'''


@pytest.fixture
def user_env(tmp_path, monkeypatch):
    """say_env.py in the working directory, as a user's own environment module; the import
    path and modules it leaves behind are undone afterwards."""
    (tmp_path / "say_env.py").write_text(USER_ENV)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    for name in ("say_env", "no_loader"):
        sys.modules.pop(name, None)


def test_a_users_environment_from_the_working_directory_with_a_group_reward(user_env):
    data = DataSection(path="verifiers:say-env", eval_size=4)  # dashes name the module, as in vf
    task = load_task(data, seed=0)
    assert len(task.eval) == 4 and len(task.train) == 8  # no eval set: 4 of the 12 held out
    problem = task.train[0]
    n = problem.columns["vf_index"]
    replies = [str(n), str(n), "other", str(n)]
    values = reward()(["q"] * 4, replies, **reward_columns([problem] * 4))
    # exact (weight 1) + agreement within the group (weight 0.5), computed by hand
    assert values == [1 + 0.5 * 3 / 4, 1 + 0.5 * 3 / 4, 0 + 0.5 * 1 / 4, 1 + 0.5 * 3 / 4]
    # two problems in one batch: each is its own group
    second = task.train[1]
    m = second.columns["vf_index"]
    values = reward()(
        ["q"] * 3, [str(n), str(m), str(m)], **reward_columns([problem, second, second])
    )
    assert values == [1.5, 1.5, 1.5]

    with pytest.raises(AscentError, match="multi-turn environment"):
        load_task(DataSection(path="verifiers:say_env", verifiers={"multi_turn": True}), 0)
    takes = "multi_turn, sampling_args, size"
    with pytest.raises(
        ConfigError, match=rf"takes no sise \(did you mean 'size'\?\); it takes: {takes}"
    ):
        load_task(DataSection(path="verifiers:say_env", verifiers={"sise": 3}), 0)
    (user_env / "no_loader.py").write_text("x = 1\n")
    with pytest.raises(AscentError, match="has no load_environment"):
        load_task(DataSection(path="verifiers:no_loader"), 0)
    with pytest.raises(AscentError, match="cannot import not_there"):
        load_task(DataSection(path="verifiers:not-there"), 0)


def test_sampling_settings_the_environment_asks_for_are_warned_about(user_env, capsys):
    load_task(DataSection(path="verifiers:say_env", eval_size=4), 0)
    assert "warning" not in capsys.readouterr().err
    wishes = {"sampling_args": {"temperature": 0.6, "max_tokens": 512}}
    load_task(DataSection(path="verifiers:say_env", eval_size=4, verifiers=wishes), 0)
    err = capsys.readouterr().err
    assert "asks to be sampled with max_tokens=512, temperature=0.6" in err
    assert "[rollout]" in err


def test_problems_of_another_source_are_left_to_their_own_reward():
    task = load_task(section(verifiers={"num_train": 100, "num_eval": 20}), seed=0)
    problem = task.train[0]
    columns = reward_columns([problem])
    columns = {k: [*v, None] for k, v in columns.items()}  # a second row from another source
    assert reward()(["q", "q"], [problem.answer, "x"], **columns) == [1.0, None]


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"path": "verifiers:"}, "names no environment"),
        ({"path": "verifiers:two words"}, "names no environment"),
        ({"eval_path": "x.jsonl"}, "makes both splits itself"),
        ({"path": "data.jsonl", "verifiers": {"digits": 3}}, "only a verifiers environment"),
    ],
)
def test_settings_an_environment_cannot_use_are_refused_at_load(keys, message):
    with pytest.raises(ValidationError, match=message):
        DataSection(**{"path": f"verifiers:{ADDITION}", **keys})


def test_without_the_package_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "verifiers", None)
    with pytest.raises(AscentError, match=r"pip install 'ascent\[verifiers\]'"):
        reward()


def test_the_example_recipe_loads():
    from ascent.configfile import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "examples" / "verifiers_tiny.toml")
    assert cfg.data.verifiers_env == ADDITION
    assert cfg.reward.functions == ["verifiers"]
