"""The tiny recipe's task, arithmetic as code: no role hands the solver its answer, and the
immediate reward ranks a right answer above every wrong one, near or far."""

from __future__ import annotations

import asyncio

from ascent.configfile import load_config
from ascent.data.arithmetic import arithmetic_problem
from ascent.rewards.judge import StdioTest
from ascent.rollout.agentic.arithmetic import column_check
from ascent.rollout.agentic.format_registry import FORMATS
from ascent.rollout.agentic.verify import AttemptVerdict, Failure
from tests.agentic.conftest import ScriptedPolicy, runner

FMT = FORMATS.get("arithmetic")
PROBLEM = arithmetic_problem(7, "+", 45, 2)  # 07+45= -> 52
RECIPE = load_config("examples/agentic_tiny.toml")
TINY = RECIPE.agentic
ROLES = {"hypothesis": "off", "solver": "policy", "testgen": "scripted", "summarizer": "scripted"}


def play(pool, tokenizer, answers: list[str], **changes):
    policy = ScriptedPolicy(tokenizer, {"solver": answers})
    settings = {
        "roles": ROLES,
        "adversarial_penalty": TINY.adversarial_penalty,
        "unparsable_reward": TINY.unparsable_reward,
        "max_turns": len(answers),
        "summarize_threshold": TINY.summarize_threshold,
        "context_window": TINY.context_window,
        "max_new_tokens": RECIPE.rollout.max_new_tokens,
    }
    run = runner(pool, tokenizer, policy, fmt="arithmetic", **(settings | changes))
    return asyncio.run(run.run(PROBLEM, 0)), policy


def test_only_an_integer_is_an_answer():
    assert FMT.parse_solution("52") is not None and FMT.parse_solution("-8\n07+") is not None
    for text in ("7+45", "50+2", "5 2", "int('52')", "", "52.0"):
        assert FMT.parse_solution(text) is None, text


def test_feedback_never_shows_the_expected_value():
    failure = Failure("generated", "wrong_answer", "d0", "2", "3")
    broken = AttemptVerdict(True, None, 0.1, broken=True, failure=failure)
    assert FMT.feedback(broken) == "fails"
    assert FMT.feedback(AttemptVerdict(True, None, 0.1)) == "ok"


def test_generated_tests_check_columns_never_the_hidden_test():
    assert column_check(52) == "len=2 d0=2 d1=5"
    assert column_check(-8) == "len=2 d0=8"
    tests = FMT.parse_tests(column_check(152), 5)
    hidden = FMT.code_problem(PROBLEM).hidden_tests
    assert tests == [StdioTest("len", "3"), StdioTest("d0", "2"), StdioTest("d1", "5"),
                     StdioTest("d2", "1")]  # fmt: skip
    assert not {t.input for t in tests} & {t.input for t in hidden}
    # The answer itself as a test (the old scripted probes) has the hidden test's input.
    assert FMT.parse_tests("52", 5) is None


def test_every_wrong_answer_is_broken_and_ranked_below_the_right_one(pool, tokenizer):
    rewards = {}
    for answer in ("52", "53", "42", "-52", "520", "9999", "7+45", "x"):
        episode, _ = play(pool, tokenizer, [answer])
        solve = episode.turns[0]
        rewards[answer] = solve.reward
        assert solve.broken == (answer not in ("52", "7+45", "x")), answer
        assert episode.delayed == (1.0 if answer == "52" else 0.0)
    wrong = [rewards[a] for a in ("53", "42", "-52", "520", "9999")]
    # Right > every wrong answer, all alike however far off > unreadable output.
    assert rewards["52"] > max(wrong) and len(set(wrong)) == 1
    assert min(wrong) > rewards["7+45"] == rewards["x"] == TINY.unparsable_reward


def test_no_transcript_the_solver_reads_holds_the_answer(pool, tokenizer):
    episode, policy = play(pool, tokenizer, ["53", "9", "11"])
    assert episode.summaries >= 1 and episode.stop == "max_turns"
    contexts = [tokenizer.decode(c, skip_special_tokens=True) for c in policy.contexts]
    for context in contexts:
        assert "52" not in context.replace("07+45=", ""), context
    # ... while the test generator's tests, which the solver does not read, confirm.
    testgen = [t for t in episode.turns if t.role == "testgen"]
    assert all(t.tests_confirmed == t.tests_proposed == 3 for t in testgen)
