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
    args = {"num_eval": 16, "question": "{a}+{b}="}  # the form the tiny model reads
    env = load_environment(ADDITION, **args)
    policy = LocalPolicy.load("ascent:tiny-arithmetic", device="cpu")
    with PolicyServer(policy, port=0, window_sec=0.05) as server:
        client = ClientConfig(api_base_url=server.url, api_key_var="ASCENT_VF_TEST_KEY")
        out = env.evaluate_sync(
            client,
            "ascent:tiny-arithmetic",
            sampling_args={"temperature": 1.0, "max_tokens": 6},
            num_examples=16,
            rollouts_per_example=4,
        )["outputs"]
    theirs = [o["reward"] for o in out]
    assert 0.0 in theirs and 1.0 in theirs, "the sample must hold right and wrong replies"
    held = {p.columns["vf_index"]: p for p in load_task(section(16, verifiers=args), 0).eval}
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


class Hooked(vf.SingleTurnEnv):
    """A rollout's hooks, each leaving a mark the rubric reads."""

    async def setup_state(self, state):
        state["bonus"] = 0.25

    async def add_trajectory_step(self, state, step):
        step["extras"]["seen"] = True
        state["trajectory"].append(step)

    @vf.cleanup
    async def finish(self, state):
        state["finished"] = state["trajectory"][-1]["extras"].get("seen", False)


def marks(state) -> float:
    return state["bonus"] + (0.5 if state.get("finished") else 0.0)


def load_environment(
    size: int = 12, multi_turn: bool = False, sampling_args=None, hooked: bool = False
):
    rows = [{"question": f"say {i}", "answer": str(i)} for i in range(size)]

    def exact(completion, answer):
        return float(completion[-1]["content"].strip() == answer)

    def agreement(completions) -> list[float]:
        """Group reward: the share of the group giving the same reply."""
        replies = [c[-1]["content"] for c in completions]
        return [replies.count(r) / len(replies) for r in replies]

    rubric = vf.Rubric(funcs=[exact, agreement], weights=[1.0, 0.5])
    if hooked:
        rubric = vf.Rubric(funcs=[exact, marks])
        return Hooked(dataset=Dataset.from_list(rows), rubric=rubric)
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
    for name in ("say_env", "no_loader", "open_env", *(n[:-3] for n in BROKEN)):
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
    takes = "hooked, multi_turn, sampling_args, size"
    with pytest.raises(
        ConfigError, match=rf"takes no sise \(did you mean 'size'\?\); it takes: {takes}"
    ):
        load_task(DataSection(path="verifiers:say_env", verifiers={"sise": 3}), 0)
    (user_env / "no_loader.py").write_text("x = 1\n")
    with pytest.raises(AscentError, match="has no load_environment"):
        load_task(DataSection(path="verifiers:no_loader"), 0)
    with pytest.raises(AscentError, match="cannot import not_there"):
        load_task(DataSection(path="verifiers:not-there"), 0)


def test_the_environments_rollout_hooks_run_before_its_rubric(user_env):
    """setup_state, add_trajectory_step and the environment's cleanup handlers run as in a
    rollout of verifiers' own, before the rubric scores."""
    data = DataSection(path="verifiers:say_env", eval_size=4, verifiers={"hooked": True})
    task = load_task(data, 0)
    problem = task.train[0]
    right = str(problem.columns["vf_index"])
    values = reward()(["q"] * 2, [right, "no"], **reward_columns([problem] * 2))
    assert values == [1 + 0.25 + 0.5, 0 + 0.25 + 0.5]


def test_a_row_that_moved_since_the_problem_was_drawn_is_refused(user_env):
    """A checkpoint's replayed rows point into the dataset by position; an environment that
    builds its rows in another order must not have them scored against other problems."""
    problem = load_task(DataSection(path="verifiers:say_env", eval_size=4), 0).train[0]
    columns = reward_columns([problem])
    columns["answer"] = ["not this row's answer"]
    with pytest.raises(AscentError, match="is not the problem this batch holds"):
        reward()(["q"], ["1"], **columns)


def test_rows_without_an_answer_are_scored(user_env):
    (user_env / "open_env.py").write_text(
        "import verifiers as vf\nfrom datasets import Dataset\n\n"
        "def load_environment():\n"
        "    rows = Dataset.from_list([{'question': f'say {i}'} for i in range(8)])\n"
        "    def length(completion) -> float:\n"
        "        return float(len(completion[-1]['content']))\n"
        "    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[length]))\n"
    )
    problem = load_task(DataSection(path="verifiers:open_env", eval_size=2), 0).train[0]
    assert problem.answer == ""
    assert reward()(["q"] * 2, ["abc", ""], **reward_columns([problem] * 2)) == [3.0, 0.0]


BROKEN = {
    "syntax_env.py": ("def load_environment(:\n", "importing syntax_env failed: SyntaxError"),
    "no_question_env.py": (
        "import verifiers as vf\nfrom datasets import Dataset\n\n"
        "def load_environment():\n"
        "    rows = lambda: Dataset.from_list([{'text': 'hi', 'answer': '1'}])\n"
        "    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[lambda: 1.0]))\n",
        "building its train dataset failed: KeyError",
    ),
    "eval_only_env.py": (
        "import verifiers as vf\nfrom datasets import Dataset\n\n"
        "def load_environment():\n"
        "    rows = Dataset.from_list([{'question': 'hi', 'answer': '1'}])\n"
        "    return vf.SingleTurnEnv(eval_dataset=rows, rubric=vf.Rubric(funcs=[lambda: 1.0]))\n",
        "has only an eval dataset",
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_an_environment_that_cannot_give_problems_is_one_line(user_env, name):
    source, message = BROKEN[name]
    (user_env / name).write_text(source)
    path = list(sys.path)
    with pytest.raises(AscentError, match=message) as caught:
        load_task(DataSection(path=f"verifiers:{name[:-3]}", eval_size=1), 0)
    assert "\n" not in str(caught.value)
    assert sys.path == path  # the run's directory was on the path for the import only
    sys.modules.pop(name[:-3], None)


def test_a_long_system_prompt_counts_in_the_prompt_length_check(cwd, run_cli):
    """The tiny model's context leaves 250 tokens beside max_new_tokens 6: a system prompt
    of 600 characters before each short question is too long, and found before the run."""
    args = '{system_prompt="' + "7" * 600 + '", num_train=40, num_eval=10}'
    settings = [f'data.path="verifiers:{ADDITION}"', f"data.verifiers={args}",
                "data.eval_size=10", 'reward.functions=["verifiers"]']  # fmt: skip
    code, _, err = run_cli("train", *(a for s in settings for a in ("--set", s)))
    assert code == 2 and "prompts are longer than the model's context allows" in err, err
    assert list(cwd.iterdir()) == []


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
