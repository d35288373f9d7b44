"""`ascent eval` with `[eval.test_time_rl]`: GRPO updates on the policy's own attempts before it
answers, on the tiny agentic task (`ascent:tiny-arithmetic`, scripted column checks), judged in
the real sandbox. The updates never read a hidden test; the weights come back exactly; every
option acts or is refused; pass@1 without and with are counted on the same problems."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import torch

from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.evaluation import run_eval
from ascent.evaluation import test_time_run as ttr
from ascent.evaluation.test_time_rl import AttemptBatches, PolicyAdapter
from ascent.evaluation.test_time_scoring import AttemptScorer, majority
from ascent.models import load_policy
from ascent.rewards.judge import StdioTest
from ascent.rollout.agentic.arithmetic import ArithmeticFormat, column_check
from ascent.rollout.agentic.verify import Verifier
from ascent.rules.llm_rules import eval_inert_settings
from tests.api.scripted_server import Reply, Seen, models_body, ok
from tests.evaluation.conftest import CHAT, MODELS, PROJECT, prompt_of

EXAMPLE = PROJECT / "examples" / "test_time_rl_tiny.toml"
MARKER = "HIDDEN-7301"  # a hidden expected output no attempt or test can produce by chance
ORACLE = 'eval.test_time_rl.labels="oracle"'  # most tests here exercise the checker's path
FAST = (
    ORACLE,
    "eval.limit=4",
    "eval.test_time_rl.steps=2",
    "eval.test_time_rl.group_size=8",
    "sandbox.workers=2",
    "logging.progress=false",
)


def config(tmp_path: Path, *extra: str):
    return load_config(EXAMPLE, [*FAST, f'eval.output_dir="{tmp_path / "out"}"', *extra])


@dataclass
class Spy:
    """What the test-time updates were fed, and the weights around them."""

    adapter: PolicyAdapter | None = None
    fed: list[tuple[list[float], torch.Tensor, torch.Tensor]] = field(default_factory=list)
    scored: list[tuple[str, str, list[str]]] = field(default_factory=list)  # view, tests, texts
    weights_after: list[dict[str, torch.Tensor]] = field(default_factory=list)
    original_at_start: list[bool] = field(default_factory=list)


@pytest.fixture
def spy(monkeypatch) -> Spy:
    seen = Spy()
    draw, adapt, score = AttemptBatches.next, PolicyAdapter.adapt, AttemptScorer.score

    def spied_next(source, version):
        out = draw(source, version)
        group = out[2]  # every attempt sampled, trained on or not
        batch = group.rollout
        seen.fed.append(
            (list(group.rewards.total), batch.prompt_ids.clone(), batch.response_ids.clone())
        )
        return out

    async def spied_adapt(adapter, prompt, visible, scorer, generator):
        seen.adapter = adapter
        seen.original_at_start.append(adapter.weights_equal_original())
        out = await adapt(adapter, prompt, visible, scorer, generator)
        seen.weights_after.append({k: v.clone() for k, v in adapter.model.state_dict().items()})
        return out

    async def spied_score(scorer, visible, texts):
        seen.scored.append((repr(visible.problem), repr(visible.tests), list(texts)))
        return await score(scorer, visible, texts)

    monkeypatch.setattr(AttemptBatches, "next", spied_next)
    monkeypatch.setattr(PolicyAdapter, "adapt", spied_adapt)
    monkeypatch.setattr(AttemptScorer, "score", spied_score)
    return seen


def corrupt_hidden(monkeypatch) -> None:
    """Every problem's hidden expected output, and its answer column, replaced by MARKER."""
    load = ttr.load_source

    def corrupted(cfg):
        source = load(cfg)
        pairs = []
        for problem, code in source.problems:
            hidden = tuple(StdioTest(t.input, MARKER) for t in code.hidden_tests)
            pairs.append((replace(problem, answer=MARKER), replace(code, hidden_tests=hidden)))
        return replace(source, problems=pairs)

    monkeypatch.setattr(ttr, "load_source", corrupted)


def results(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / "eval_results.json").read_text())


def test_the_hidden_answer_never_reaches_the_updates(sandbox, tmp_path, monkeypatch, spy):
    run_eval(config(tmp_path / "real", "run.seed=1"))  # a seed where an answer is right
    real = (list(spy.fed), list(spy.scored), list(spy.weights_after))
    assert any(u["trained"] for p in results(tmp_path / "real")["problems"]
               for u in p["update_log"])  # fmt: skip
    spy.fed.clear(), spy.scored.clear(), spy.weights_after.clear()
    corrupt_hidden(monkeypatch)
    run_eval(config(tmp_path / "wrong", "run.seed=1"))
    fed, scored, weights = spy.fed, spy.scored, spy.weights_after
    # The same rewards on the same tokens, and the same weights after every problem's updates.
    assert [r for r, _, _ in fed] == [r for r, _, _ in real[0]]
    for (_, p, r), (_, p0, r0) in zip(fed, real[0], strict=True):
        assert torch.equal(p, p0) and torch.equal(r, r0)
    assert [texts for _, _, texts in scored] == [texts for _, _, texts in real[1]]
    for after, after0 in zip(weights, real[2], strict=True):
        assert all(torch.equal(after[k], after0[k]) for k in after0)
    # Nothing the updates read holds the hidden output: the problem they scored against, the
    # confirmed tests, the prompts and attempts.
    tokenizer = spy.adapter.tokenizer
    for view, tests, texts in scored:
        assert MARKER not in view and MARKER not in tests and not any(MARKER in t for t in texts)
    for _, prompt_ids, response_ids in fed:
        assert MARKER not in tokenizer.decode(torch.cat([prompt_ids[0], response_ids[0]]))
    # ... while the judge did read the corrupted hidden tests: the same answers now all fail.
    right, wrong = results(tmp_path / "real"), results(tmp_path / "wrong")
    assert [p["answer_with"]["text"] for p in wrong["problems"]] == [
        p["answer_with"]["text"] for p in right["problems"]
    ]
    assert wrong["overall"]["solved_with"] == wrong["overall"]["solved_without"] == 0
    assert right["overall"]["solved_with"] > 0


def test_weights_are_restored_exactly_between_problems(sandbox, tmp_path, spy):
    cfg = config(tmp_path)
    run_eval(cfg)
    assert len(spy.original_at_start) == 4 and all(spy.original_at_start)
    moved = [
        any(not torch.equal(w[k], spy.adapter.original[k]) for k in w) for w in spy.weights_after
    ]
    assert any(moved)  # the updates did change the weights, and each problem started without them
    fresh = load_policy(cfg.model, torch.device("cpu")).state_dict()
    assert all(torch.equal(spy.adapter.model.state_dict()[k], fresh[k]) for k in fresh)


def test_a_problem_adapts_the_same_whatever_ran_before_it(sandbox, tmp_path, monkeypatch, spy):
    run_eval(config(tmp_path / "all"))
    load = ttr.load_source
    monkeypatch.setattr(ttr, "load_source", lambda cfg: _drop_first(load(cfg)))
    run_eval(config(tmp_path / "alone"))
    together, alone = results(tmp_path / "all")["problems"][1:], results(tmp_path / "alone")
    assert together == alone["problems"]


def _drop_first(source):
    return replace(source, problems=source.problems[1:])


def test_band_scope_carries_updates_within_a_band_and_restores_between(
    sandbox, tmp_path, monkeypatch, spy
):
    load = ttr.load_source

    def two_bands(cfg):  # problems 0, 1 rated 1000, problems 2, 3 rated 1500
        source = load(cfg)
        pairs = [(p, replace(c, rating=1000 if i < 2 else 1500))
                 for i, (p, c) in enumerate(source.problems)]  # fmt: skip
        return replace(source, problems=pairs)

    monkeypatch.setattr(ttr, "load_source", two_bands)
    run_eval(config(tmp_path, "eval.test_time_rl.scope=band"))
    out = results(tmp_path)
    first_trained = out["problems"][0]["updates"] > 0
    assert spy.original_at_start == [
        True,
        not first_trained,
        True,
        out["problems"][2]["updates"] == 0,
    ]
    assert [b["band"] for b in out["bands"]] == ["[0, 1200)", "[1200, 1800)"]
    assert any("scope = band" in n for n in out["notes"])


def _value(key: str) -> int:
    a, op, b = re.fullmatch(r"(\d+)([+\-*])(\d+)", key).groups()
    return {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]


def _right(text: str, key: str) -> bool:
    line = text.strip().split("\n", 1)[0].strip()
    return re.fullmatch(r"-?\d+", line) is not None and int(line) == _value(key)


def test_pass_at_1_without_and_with_count_the_same_problems(sandbox, tmp_path, run_cli):
    code, out, err = run_cli("eval", str(EXAMPLE), *[a for s in FAST for a in ("--set", s)],
                             "--set", f'eval.output_dir="{tmp_path / "out"}"',
                             "--set", "optim.lr=0.5")  # fmt: skip
    assert code == 0, err
    assert "warning: [optim] lr: test-time RL takes one optimiser step" in err
    assert "pass@1 without" in out and "pass@1 with" in out and "no signal" in out
    data = results(tmp_path)
    problems, overall = data["problems"], data["overall"]
    assert overall["problems"] == len(problems) == 4
    # Checked by hand from each problem's key (`79+22`) and the answer's text, not by the judge.
    without = sum(_right(p["answer_without"]["text"], p["id"]) for p in problems)
    with_rl = sum(_right(p["answer_with"]["text"], p["id"]) for p in problems)
    assert overall["solved_without"] == without and overall["solved_with"] == with_rl
    assert overall["pass@1_without"] == without / 4 and overall["pass@1_with"] == with_rl / 4
    assert overall["gained"] - overall["lost"] == with_rl - without
    assert overall["updates"] == sum(p["updates"] for p in problems)
    assert overall["no_signal"] == sum(p["no_signal"] for p in problems)
    for p in problems:  # weights that never moved answer as before
        if p["updates"] == 0:
            assert p["answer_with"] == p["answer_without"]
        assert p["visible_tests"]["generated_confirmed"] >= 2  # len and the ones digit at least
    assert data["bands"][0]["problems"] == 4 and data["test_time_rl"]["group_size"] == 8


def test_an_api_test_generator_writes_tests_the_reference_then_checks(sandbox, tmp_path, server):
    """Tests are asked for once per problem, from the problem alone; only those the reference
    solution reproduces score the attempts; [eval] temperature acts for the API role."""

    def answer(seen: Seen) -> Reply:  # the right column checks, and one wrong ones digit
        key = re.search(r"(\d+[+\-*]\d+)=", prompt_of(seen)).group(1)
        wrong = (_value(key) + 1) % 10
        return ok(f"{column_check(_value(key))} d0={wrong}")

    server.default(MODELS, Reply(200, models_body("testgen-m")))
    server.default(CHAT, answer)
    keys = ("agentic.roles.testgen=api", "models.testgen_model=testgen-m", "eval.temperature=0.5")
    api = (f'api.base_url="{server.url}/v1"', 'api.api_key_env=""', "api.max_retries=0")
    run_eval(config(tmp_path, *keys, *api))
    data = results(tmp_path)
    assert server.count(CHAT) == 4 and data["testgen"] == "api"
    assert all(s.body["temperature"] == 0.5 for s in server.requests(CHAT))
    assert not any("## Solution" in prompt_of(s) for s in server.requests(CHAT))  # no attempt
    for p in data["problems"]:
        checks = len(column_check(_value(p["id"])).split())
        assert p["visible_tests"] == {
            "sample": 0,
            "generated_proposed": checks + 1,
            "generated_confirmed": checks,
        }
    assert data["usage"]["testgen"]["requests"] == 4


def _code_problems(tmp_path: Path) -> Path:
    """Read n, print 2n (or 3n): a sample test, hidden tests, a Python reference solution."""
    rows = [
        {
            "id": f"times{k}",
            "statement": f"Read n and print {k} times n.",
            "sample_tests": [{"input": "1\n", "output": f"{k}\n"}],
            "hidden_tests": [{"input": "5\n", "output": f"{5 * k}\n"}],
            "reference_solution": f"print(int(input()) * {k})\n",
            "reference_language": "python",
        }
        for k in (2, 3)
    ]
    path = tmp_path / "times.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_code_problems_whose_attempts_all_fail_alike_get_no_update(sandbox, tmp_path):
    """The tiny arithmetic model writes no fenced program: every attempt is unreadable, no
    group has signal, no step is taken, and each answer with test-time RL is the one without."""
    fit = ("eval.role_instructions=false", "eval.max_problem_chars=60")
    run_eval(config(tmp_path, f'eval.problems="{_code_problems(tmp_path)}"', *fit))
    data = results(tmp_path)
    assert data["overall"]["no_signal"] == 2 and data["overall"]["updates"] == 0
    for p in data["problems"]:
        assert (
            p["answer_with"] == p["answer_without"] and p["answer_with"]["status"] == "no program"
        )
        # the scripted code test generator proposes the sample tests; the reference confirms them
        assert p["visible_tests"] == {
            "sample": 1,
            "generated_proposed": 1,
            "generated_confirmed": 1,
        }
        assert all(u["why_not"] == "no signal" for u in p["update_log"])


def test_a_test_generator_with_no_reference_to_confirm_it_is_said(sandbox, tmp_path):
    path = _code_problems(tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        del row["reference_solution"], row["reference_language"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fit = ("eval.role_instructions=false", "eval.max_problem_chars=60")
    run_eval(config(tmp_path, f'eval.problems="{path}"', *fit))
    data = results(tmp_path)
    assert "2 problem(s) got no confirmed generated tests (no reference solution to confirm " in (
        " ".join(data["notes"])
    )
    assert all(p["visible_tests"]["generated_proposed"] == 0 for p in data["problems"])


def test_a_prompt_over_the_models_context_is_refused(sandbox, tmp_path, run_cli):
    problems = f'eval.problems="{_code_problems(tmp_path)}"'
    code, _, err = run_cli("eval", str(EXAMPLE), "--set", problems)
    assert code == 2 and "is over the context (256 tokens); set [eval] max_problem_chars" in err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.policy=api", "[eval.test_time_rl]: test-time RL updates the policy's weights"),
        ("eval.mode=single", 'set [eval] mode = "agentic"'),
        ("eval.test_time_rl.group_size=1", "group_size: must be greater than or equal to 2"),
        ("agentic.roles.hypothesis=scripted", 'hypothesis = "scripted": test-time RL: set'),
        ("agentic.roles.summarizer=scripted", 'set summarizer = "off"'),
        ("agentic.roles.testgen=policy", "would write the tests it is scored on"),
        ("agentic.max_turns=3", "[agentic] max_turns: test-time RL scores single attempts"),
        ("algorithm.kl_coef=0.01", "[algorithm] kl_coef: test-time RL does not use it"),
        ("eval.temperature=0.7", "[eval] temperature: with test-time RL the answers are greedy"),
        ("eval.max_problem_chars=40", "[eval] max_problem_chars: the arithmetic task writes"),
        ((ORACLE, "agentic.roles.testgen=off"), "no attempt could be scored; set [agentic.roles]"),
        ("eval.only_bands=true", "no problem is rated inside [eval] rating_bands (200 without"),
    ],
)
def test_what_cannot_act_is_refused_in_one_line(run_cli, override, message):
    overrides = override if isinstance(override, tuple) else (override,)
    code, _, err = run_cli("eval", str(EXAMPLE), *(a for o in overrides for a in ("--set", o)))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("eval.test_time_rl.steps=3", "[eval.test_time_rl] steps does nothing while test-time RL"),
        ('eval.problems="data:held_out"', '"data:held_out" is read only by test-time RL'),
    ],
)
def test_test_time_keys_do_nothing_while_it_is_off(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, [override])


def test_a_problem_file_without_samples_or_reference_is_refused(tmp_path, run_cli):
    rows = [{"id": "p", "statement": "Print 1.", "hidden_tests": [{"input": "", "output": "1"}]}]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = run_cli(
        "eval", str(EXAMPLE), "--set", f'eval.problems="{path}"', "--set", ORACLE
    )
    assert code == 2 and "has a sample test or a reference solution" in err, err


# -- labels = "vote": majority-vote test-time RL, no checker -----------------------------------

VOTE = ('eval.test_time_rl.labels="vote"', 'agentic.roles.testgen="off"')


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        ([["5\n"], ["5"], ["6"]], ["5"]),  # 2 of 3, whitespace aside
        ([["5"], ["6"]], [None]),  # a tie: no label
        ([["5"], ["6"], ["7"]], [None]),  # no output given twice
        ([["5", "a"], ["5", "b"], ["4", "b"], None], ["5", "b"]),  # per input; None: no program
        ([["1 2"], ["1  2\n"], [None], [None], [None]], ["1 2"]),  # runs that failed do not vote
        ([None, None], []),
    ],
)
def test_majority_is_the_output_most_attempts_agree_on(outputs, expected):
    assert majority(outputs) == expected


def test_a_majority_below_vote_min_share_is_no_label():
    runs = [["5"], ["5"], ["6"], ["7"], ["8"]]  # 2 of the 5 that ran agree
    assert majority(runs) == ["5"]
    assert majority(runs, 0.4) == ["5"] and majority(runs, 0.5) == [None]
    # attempts without a program, or whose run failed, are not among those that ran
    assert majority([["5"], ["5"], ["6"], None, None, [None]], 0.6) == ["5"]


def test_the_default_is_what_a_contestant_has_and_the_oracle_is_warned_about():
    plain = load_config(EXAMPLE)
    assert plain.eval.test_time_rl.labels == "vote" and plain.warnings == []
    for name in ("oracle", "reference"):  # "reference" is the oracle's old name
        cfg = load_config(EXAMPLE, [f'eval.test_time_rl.labels="{name}"'])
        assert cfg.eval.test_time_rl.labels == "oracle"
        assert any("reads the reference solution: an upper bound" in w for w in cfg.warnings)
    with pytest.raises(ConfigError, match='vote_min_share acts only with labels = "vote"'):
        load_config(EXAMPLE, [ORACLE, "eval.test_time_rl.vote_min_share=0.7"])


def test_a_vote_rewards_agreement_with_the_most_common_output(sandbox, tmp_path):
    """Rewards from [reward.code] compile_reward 0.1, adversarial_penalty -0.5 and
    unparsable_reward -0.5, as in the example; the true answer of 2+3 plays no part."""
    from ascent.config.rewards import CodeRewardSection, SandboxSection
    from ascent.data import Problem
    from ascent.rewards.sandbox import SandboxPool

    fmt = ArithmeticFormat()
    problem = Problem(key="02+03", prompt="02+03=", answer="5")
    code = fmt.code_problem(problem)

    async def scores(texts):
        with SandboxPool(SandboxSection(workers=2)) as pool:
            verifier = Verifier(pool, CodeRewardSection(compile_reward=0.1), SandboxSection())
            scorer = AttemptScorer(fmt, verifier, testgen="off", api=None, max_generated_tests=8,
                                   adversarial_penalty=-0.5, unparsable_reward=-0.5,
                                   default_language="python", labels="vote")  # fmt: skip
            visible = await scorer.prepare(problem, code)
            assert visible.vote_inputs == ("",) and visible.code.reference_solution is None
            scored = await scorer.score(visible, texts)
            jobs.append(verifier.runs)
            return scored

    jobs: list[int] = []
    wrong_majority = asyncio.run(scores(["7", "7", "5", "x", "7"]))
    assert jobs == [2]  # one sandbox job per distinct program: judged and voted on one compile
    assert wrong_majority.rewards == pytest.approx([0.1, 0.1, -0.4, -0.5, 0.1])
    assert wrong_majority.accepted == [True, True, False, False, True]
    tie = asyncio.run(scores(["7", "5"]))  # no majority: nothing is broken
    assert tie.rewards == pytest.approx([0.1, 0.1])


def test_a_vote_never_reads_the_reference_solution_or_the_hidden_tests(
    sandbox, tmp_path, monkeypatch, spy
):
    run_eval(config(tmp_path / "real", *VOTE))
    real = (list(spy.fed), list(spy.weights_after))
    assert real[0]  # updates were taken
    spy.fed.clear(), spy.weights_after.clear()
    load = ttr.load_source

    def corrupted(cfg):  # hidden outputs, answers and reference solutions all say MARKER
        source = load(cfg)
        pairs = []
        for problem, code in source.problems:
            hidden = tuple(StdioTest(t.input, MARKER) for t in code.hidden_tests)
            code = replace(code, hidden_tests=hidden, reference_solution=f"print('{MARKER}')")
            pairs.append((replace(problem, answer=MARKER), code))
        return replace(source, problems=pairs)

    monkeypatch.setattr(ttr, "load_source", corrupted)
    run_eval(config(tmp_path / "wrong", *VOTE))
    assert [r for r, _, _ in spy.fed] == [r for r, _, _ in real[0]]
    for after, after0 in zip(spy.weights_after, real[1], strict=True):
        assert all(torch.equal(after[k], after0[k]) for k in after0)
    for view, tests, _ in spy.scored:
        assert "reference_solution=None" in view and MARKER not in view and tests == "()"


def test_with_reference_labels_the_reference_solution_is_the_checker(tmp_path):
    """What the tiny example's lift rests on, written down: without the reference solution
    nothing confirms the column checks and no attempt can be scored."""
    load = ttr.load_source

    def unreferenced(cfg):
        source = load(cfg)
        pairs = [(p, replace(c, reference_solution=None)) for p, c in source.problems]
        return replace(source, problems=pairs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ttr, "load_source", unreferenced)
        with pytest.raises(ConfigError, match='labels = "vote"'):
            run_eval(config(tmp_path))


@pytest.mark.parametrize(
    ("override", "warning"),
    [
        ("agentic.api_max_tokens=64", "[agentic] api_max_tokens acts only in training"),
        ("agentic.correction_clip=3.0", "[agentic] correction_clip acts only in asynchronous"),
        ("agentic.immediate_reward_weight=0.5", "immediate_reward_weight acts only in credit"),
        ("train.ppo_epochs=4", "[train] ppo_epochs: test-time RL takes one optimiser step"),
        ('optim.schedule="linear"', "[optim] schedule: test-time RL takes one optimiser step"),
    ],
)
def test_what_eval_cannot_act_on_is_warned_about(override, warning):
    """Warned, not refused: `ascent eval RUN_DIR` reads a training run's config."""
    assert eval_inert_settings(load_config(EXAMPLE)) == []  # the example sets nothing idle
    assert any(warning in w for w in eval_inert_settings(load_config(EXAMPLE, [override])))


def test_a_penalty_acts_in_a_vote_without_a_test_generator():
    penalty = "agentic.adversarial_penalty=-0.3"
    assert eval_inert_settings(load_config(EXAMPLE, [*VOTE, penalty])) == []
    off = load_config(EXAMPLE, [ORACLE, 'agentic.roles.testgen="off"', penalty])
    assert any("adversarial_penalty does nothing" in w for w in eval_inert_settings(off))


def test_a_row_format_for_held_out_code_data_is_refused():
    """With problems = "data:held_out" over code rows of [data] path, [data] reads the rows;
    an [eval] format would change nothing."""
    from ascent.evaluation.agentic_parts import EvalFormat
    from ascent.evaluation.bands import Skipped as NoSkips
    from ascent.evaluation.test_time_setup import ProblemSource, check_eval_keys

    cfg = load_config(EXAMPLE, ['eval.format="code_contests"'])
    source = ProblemSource("data:held_out (rows.jsonl)", Path("rows.jsonl"), "code",
                           EvalFormat(True, 0), [], NoSkips())  # fmt: skip
    with pytest.raises(ConfigError, match=r'\[eval\] format: with problems = "data:held_out"'):
        check_eval_keys(cfg, source)
    with pytest.raises(ConfigError, match="no problem of data:held_out"):
        check_eval_keys(load_config(EXAMPLE, [ORACLE]), source)  # on to the next check
