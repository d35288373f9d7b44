"""The math reward: answer extraction, gold parsing, equivalence, values, threads, time limits."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from ascent.config.rewards import MathRewardSection
from ascent.errors import AscentError
from ascent.rewards.math import (
    MathReward,
    MathVerifier,
    _VerifierProcess,
    compare_numbers,
    extract_answer,
    math_reward,
    parse_gold,
)
from tests.rewards.conftest import read_jsonl

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def reward() -> Iterator[MathReward]:
    r = MathReward(MathRewardSection())
    yield r
    r.close()


# -- extraction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so the result is \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
        ("first \\boxed{1}, then finally \\boxed{2}", "2"),  # the last box
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces do not close the box
        ("$\\boxed 7$", "7"),  # \boxed without braces
        ("\\fbox{x^2}", "x^2"),
        ("\\boxed{3} and a truncated \\boxed{\\frac{1}{", "3"),  # unbalanced: the earlier box
    ],
)
def test_extract_boxed_answers(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("We add them. The answer is 18.", "18"),
        ("Therefore, the final answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
        ("The answer is: **12**", "12"),
        ("So the answer is 3.5.\nExtra words after.", "3.5"),
        ("the answer is \\boxed{9} obviously", "9"),
        # A later "answer is" that names no mathematics is not the answer.
        ("The answer is 12. Let me verify whether the answer is correct.", "12"),
        ("The answer is 3. Hmm, the answer is $x^2$.", "x^2"),
        ("I think the answer is B.", "B"),  # nothing mathematical anywhere: the last one
    ],
)
def test_the_answer_is_fallback(text, expected):
    assert extract_answer(text) == expected


def test_fallback_can_be_switched_off_and_nothing_found_is_none():
    assert extract_answer("The answer is 18.", answer_is_fallback=False) is None
    assert extract_answer("I do not know.") is None
    assert extract_answer("") is None


def test_a_configured_pattern_replaces_boxed():
    text = "Answer: 12\n...\nAnswer: 13\n\\boxed{99}"
    assert extract_answer(text, pattern=r"Answer:\s*(\S+)") == "13"
    assert (
        extract_answer("\\boxed{99}", pattern=r"Answer:\s*(\S+)", answer_is_fallback=False) is None
    )


def test_a_pattern_whose_group_did_not_take_part_counts_as_no_answer():
    optional = r"(?:Answer: (\d+))?"  # matches everywhere, mostly with an empty group
    assert extract_answer("Answer: 7 and more", pattern=optional) == "7"
    assert extract_answer("no digits", pattern=optional, answer_is_fallback=False) is None
    assert extract_answer("the answer is 5", pattern=optional) == "5"  # then the fallback


def test_pattern_without_a_group_or_invalid_is_a_config_error():
    with pytest.raises(ValueError, match="capture group"):
        MathRewardSection(answer_pattern=r"Answer: \S+")
    with pytest.raises(ValueError, match="not a valid regex"):
        MathRewardSection(answer_pattern=r"Answer: (\S+")


@pytest.mark.parametrize(
    ("gold", "expected"),
    [
        ("She has 5 + 3 = 8 apples.\n#### 8", "8"),
        ("Total: 1,234 dollars\n#### 1,234", "1234"),
        ("#### -3", "-3"),
        ("\\frac{\\pi}{2}", "\\frac{\\pi}{2}"),
        ("The area is \\boxed{12}.", "12"),
        (42, "42"),
    ],
)
def test_parse_gold(gold, expected):
    assert parse_gold(gold) == expected


def test_plain_numbers_are_settled_without_math_verify_only_when_it_would_agree():
    assert compare_numbers("1,000", "1000") == "equal"
    assert compare_numbers("72", "72.0") == "equal"
    assert compare_numbers("\\$18", "18") == "equal"
    assert compare_numbers("5", "6") == "not_equal"
    assert compare_numbers("0.333333", "0.3333333") is None  # math-verify rounds: ask it
    assert compare_numbers("\\frac{1}{2}", "0.5") is None
    assert compare_numbers("1000", "1\\,000") == "equal"  # LaTeX thin-space grouping
    assert compare_numbers("1000", "1{,}000") == "equal"
    assert compare_numbers("1234567", "1\\,234\\,567") == "equal"


def test_boxed_numbers_with_latex_thousands_separators_score_correct(reward):
    values = reward(
        [""] * 3,
        ["\\boxed{1\\,000}", "\\boxed{1{,}000}", "\\boxed{1\\,001}"],
        answer=["1000", "#### 1,000", "1000"],
    )
    assert values == [1.0, 1.0, -1.0]


# -- equivalence with math-verify --------------------------------------------------------------

EQUIVALENT = [
    ("\\frac{1}{2}", "0.5"),
    ("0.5", "\\frac12"),
    ("\\{1,2\\}", "\\{2,1\\}"),  # sets
    ("[0,1)", "[0, 1)"),  # intervals
    ("50\\%", "0.5"),  # percent
    ("10", "10\\text{ cm}"),  # units in \text{}
    ("\\frac{\\pi}{2}", "\\pi/2"),
    ("2\\sqrt{3}", "\\sqrt{12}"),
    ("x=3", "3"),
]
DIFFERENT = [
    ("[0,1)", "(0,1]"),
    ("\\{1,2\\}", "\\{1,3\\}"),
    ("\\frac{1}{3}", "0.3"),
    ("\\sqrt{2}", "2"),
]


def test_equivalent_answers_score_correct_and_different_ones_wrong(reward):
    pairs = EQUIVALENT + DIFFERENT
    completions = [f"Thus \\boxed{{{pred}}}." for _, pred in pairs]
    values = reward([""] * len(pairs), completions, answer=[gold for gold, _ in pairs])
    assert values == [1.0] * len(EQUIVALENT) + [-1.0] * len(DIFFERENT)


def test_reward_values_and_details_follow_the_config():
    cfg = MathRewardSection(correct_reward=2.0, wrong_reward=-0.5, missing_reward=-2.0)
    custom = MathReward(cfg)
    try:
        scored = custom.score(
            [""] * 4,
            ["\\boxed{4}", "\\boxed{5}", "no answer here", "\\boxed{4}"],
            answer=["#### 4", "4", "4", None],
        )
    finally:
        custom.close()
    assert scored.values == [2.0, -0.5, -2.0, None]  # no gold: not applicable
    assert [d["outcome"] for d in scored.details] == ["equal", "not_equal", "no_answer", "no_gold"]
    assert scored.details[0]["extracted"] == "4" and scored.details[0]["gold"] == "4"


def test_conversational_completions_use_the_last_message(reward):
    chat = [{"role": "assistant", "content": "Let me think. \\boxed{12}"}]
    assert reward([[{"role": "user", "content": "q"}]], [chat], answer=["12"]) == [1.0]


def test_missing_answer_counts_as_wrong_by_default(reward):
    assert reward([""], ["I give up"], answer=["7"]) == [-1.0]


def test_a_missing_answer_column_is_an_error_naming_it(reward):
    with pytest.raises(AscentError, match="needs a 'answer' column"):
        reward([""], ["\\boxed{1}"], solution=["1"])


def test_math_reward_function_works_from_many_threads_without_hanging():
    # math-verify's own timeout uses signals and fails off the main thread; ours does not.
    golds = ["\\frac{1}{2}", "\\{1,2\\}", "[0,1)", "7"]
    preds = ["\\boxed{0.5}", "\\boxed{\\{2,1\\}}", "\\boxed{[0,1)}", "\\boxed{8}"]

    def one_batch(_: int) -> list[float | None]:
        assert threading.current_thread() is not threading.main_thread()
        return math_reward([""] * 4, preds, answer=golds)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one_batch, range(8)))
    assert results == [[1.0, 1.0, 1.0, -1.0]] * 8


def test_a_check_that_overruns_its_time_limit_scores_wrong(reward):
    # A tower of powers that sympy cannot finish: math-verify gives up after its limit.
    start = time.monotonic()
    scored = MathReward(MathRewardSection(timeout_s=1.0))
    try:
        result = scored.score([""], ["\\boxed{9^{9^{9^{8}}}}"], answer=["9^{9^{9^{9}}}"])
    finally:
        scored.close()
    assert result.values == [-1.0]
    assert result.details[0]["outcome"] == "timeout"
    assert time.monotonic() - start < 15


def test_a_hung_checker_process_is_killed_and_replaced(monkeypatch):
    hang = "print('{\"ready\": true}', flush=True)\nimport time\ntime.sleep(600)\n"
    monkeypatch.setattr(_VerifierProcess, "args", ("-c", hang))
    verifier = MathVerifier(workers=1, timeout_s=1.0)
    try:
        start = time.monotonic()
        outcome = verifier.check("\\frac{1}{2}", "\\sqrt{2}")
        assert outcome["outcome"] == "timeout"
        assert time.monotonic() - start < 10  # 3 x 1 s + 2 s of grace, not 600 s
        process = verifier._procs[0]
        assert process._proc is None  # killed; the next check starts a fresh one
    finally:
        verifier.close()


# -- real data: GSM8K -------------------------------------------------------------------------


def check_gsm8k(reward: MathReward, rows: list[dict]) -> None:
    # Completions box the raw text after "####" ("1,450,000" included), not parse_gold's output.
    golds = [row["answer"] for row in rows]
    raw = [g.rsplit("####", 1)[1].strip() for g in golds]
    right = [f"Let me compute step by step.\nThe total is \\boxed{{{r}}}." for r in raw]
    wrong = [f"\\boxed{{{int(r.replace(',', '')) + 1}}}" for r in raw]
    values = reward([""] * 2 * len(rows), right + wrong, answer=golds + golds)
    assert values[: len(rows)] == [1.0] * len(rows)
    assert values[len(rows) :] == [-1.0] * len(rows)


def test_gsm8k_gold_answers_boxed_score_correct_sample(reward):
    rows = read_jsonl("gsm8k_test.jsonl")
    assert len(rows) == 1319
    check_gsm8k(reward, random.Random(5).sample(rows, 40))


@pytest.mark.slow
def test_every_gsm8k_gold_answer_boxed_scores_correct(reward):
    check_gsm8k(reward, read_jsonl("gsm8k_test.jsonl"))


def test_gsm8k_golds_agree_with_math_verify_itself(reward):
    # The plain-number shortcut must not hide what math-verify would say: ask it directly.
    rows = random.Random(7).sample(read_jsonl("gsm8k_test.jsonl"), 10)
    proc = _VerifierProcess()
    try:
        for row in rows:
            gold = parse_gold(row["answer"])
            assert proc.check(gold, gold, 5.0)["outcome"] == "equal"
            assert proc.check(gold, str(int(float(gold)) + 1), 5.0)["outcome"] == "not_equal"
    finally:
        proc.stop()
