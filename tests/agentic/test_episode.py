"""Episodes in the real sandbox with a scripted stand-in for the policy: test validation by
the reference solution, unparsable role outputs, the adversarial term, summarization."""

from __future__ import annotations

import asyncio
import json

import pytest

from ascent.config.rewards import CodeRewardSection
from ascent.errors import AscentError
from ascent.rewards.judge import StdioTest
from ascent.rollout.agentic.chat import ChatTemplate
from ascent.rollout.agentic.rows import build_rows
from ascent.rollout.agentic.verify import Verifier
from tests.agentic.conftest import (
    SANDBOX,
    ScriptedPolicy,
    double_problem,
    fenced,
    runner,
)

WRONG = "print(int(input()) + 1)\n"  # passes the sample (1 -> 2), fails everything else
RIGHT = "print(2 * int(input()))\n"
ECHO = "print(int(input()))\n"  # fails the sample


def json_tests(*pairs: tuple[str, str]) -> str:
    body = json.dumps([{"input": i, "output": o} for i, o in pairs])
    return f"```json\n{body}\n```"


TWO_TESTS = json_tests(("1\n", "2\n"), ("5\n", "10\n"))  # WRONG passes the first only


def test_generated_tests_count_only_when_the_reference_solution_agrees(pool):
    verifier = Verifier(pool, CodeRewardSection(), SANDBOX)
    code = runner(pool, None, None).fmt.code_problem(double_problem())
    proposed = [StdioTest("5\n", "10\n"), StdioTest("5\n", "11\n"), StdioTest("7\n", "14")]
    validation = asyncio.run(verifier.validate(code, proposed, "python"))
    assert validation.proposed == 3
    assert validation.confirmed == [proposed[0], proposed[2]]  # 11 is not what 2 * 5 prints
    # Without a reference solution nothing can be confirmed, so no generated test counts.
    bare = runner(pool, None, None).fmt.code_problem(double_problem(reference=None))
    assert asyncio.run(verifier.validate(bare, proposed, None)).confirmed == []


def test_a_generated_test_with_a_hidden_tests_input_does_not_count(pool):
    verifier = Verifier(pool, CodeRewardSection(), SANDBOX)
    code = runner(pool, None, None).fmt.code_problem(double_problem())
    copies = [StdioTest("3\n", "6\n"), StdioTest(" 10 ", "20"), StdioTest("4\n", "8\n")]
    validation = asyncio.run(verifier.validate(code, copies, "python"))
    # 3 -> 6 and 10 -> 20 are the hidden tests (the reference agrees, but they would show
    # the hidden answers in the feedback): only 4 -> 8 counts.
    assert validation.confirmed == [copies[2]] and validation.hidden_copies == 2


def test_the_reference_solution_runs_in_its_own_language_or_is_refused(pool, tokenizer):
    problem = double_problem()
    del problem.columns["reference_language"]
    policy = ScriptedPolicy(tokenizer, {"solver": [fenced(RIGHT)]})
    roles = {"hypothesis": "off", "solver": "policy", "testgen": "scripted", "summarizer": "off"}
    with pytest.raises(AscentError, match="add a reference_language column"):
        asyncio.run(runner(pool, tokenizer, policy, roles=roles).run(problem, 1))
    # A C++ reference is never run as Python: asked to, the verifier runs it as C++, and
    # the scripted solver writes it in a ```cpp fence.
    problem.columns["reference_language"] = "c++"
    fmt = runner(pool, None, None).fmt
    assert fmt.reference_language(problem, fmt.code_problem(problem)) == "cpp"
    # Without testgen (and with a policy solver) the reference is never run: no language needed.
    del problem.columns["reference_language"]
    roles["testgen"] = "off"
    policy = ScriptedPolicy(tokenizer, {"solver": [fenced(RIGHT)]})
    assert asyncio.run(runner(pool, tokenizer, policy, roles=roles).run(problem, 1)).solved


def test_verdicts_are_cached_by_content_not_by_problem_id(pool):
    verifier = Verifier(pool, CodeRewardSection(), SANDBOX)
    fmt = runner(pool, None, None).fmt
    double = fmt.code_problem(double_problem())
    triple = fmt.code_problem(double_problem(reference="print(int(input()) * 3)\n", factor=3))
    assert double.id == triple.id
    assert asyncio.run(verifier.final(double, RIGHT, "python")).passed == 2
    assert asyncio.run(verifier.final(triple, RIGHT, "python")).passed == 0
    tests = [StdioTest("5\n", "10\n")]
    assert asyncio.run(verifier.validate(double, tests, "python")).confirmed == tests
    assert asyncio.run(verifier.validate(triple, tests, "python")).confirmed == []
    assert asyncio.run(verifier.attempt(double, RIGHT, "python", [])).samples_ok
    assert not asyncio.run(verifier.attempt(triple, RIGHT, "python", [])).samples_ok


def test_the_submitted_program_is_the_attempt_that_passed_the_most_tests(pool, tokenizer):
    # Attempt 1 passes the sample and 1 of 2 confirmed tests; attempt 2 fails the sample.
    policy = ScriptedPolicy(
        tokenizer, {"solver": [fenced(WRONG), fenced(ECHO)], "testgen": [TWO_TESTS] * 2}
    )
    roles = {"hypothesis": "off", "solver": "policy", "testgen": "policy", "summarizer": "off"}
    episode = asyncio.run(
        runner(pool, tokenizer, policy, roles=roles, max_turns=2).run(double_problem(), 6)
    )
    assert episode.stop == "max_turns"
    assert episode.program == (WRONG, "python")  # not the latest compiled program (ECHO)
    assert episode.program_rank == (1, 2)  # samples ok; the sample and 1 -> 2 passed


def test_unparsable_outputs_are_penalised_turns_and_a_confirmed_test_costs_the_solver(
    pool, tokenizer
):
    policy = ScriptedPolicy(
        tokenizer,
        {
            "solver": [fenced(WRONG), RIGHT, fenced(RIGHT)],  # the second has no code block
            "testgen": [json_tests(("5\n", "10\n"), ("4\n", "9\n")), "no tests today"],
        },
    )
    roles = {"hypothesis": "off", "solver": "policy", "testgen": "policy", "summarizer": "off"}
    episode = asyncio.run(runner(pool, tokenizer, policy, roles=roles).run(double_problem(), 5))

    solver = [t for t in episode.turns if t.role == "solver"]
    testgen = [t for t in episode.turns if t.role == "testgen"]
    # Attempt 1: compiles and passes the sample (0.3), but the confirmed test 5 -> 10 breaks it.
    assert solver[0].reward == pytest.approx(0.3 - 0.5) and solver[0].note.startswith("broken")
    assert testgen[0].reward == pytest.approx(0.5) and testgen[0].note == "1/2 confirmed"
    # Attempt 2: no code block: a recorded, penalised turn; the episode goes on.
    assert (solver[1].parsed, solver[1].reward) == (False, -0.1)
    assert len(testgen) == 2  # no program, so no tests were asked for in attempt 2
    # Attempt 3: right; the test generator's output cannot be read: penalised.
    assert solver[2].reward == pytest.approx(0.3)
    assert (testgen[1].parsed, testgen[1].reward) == (False, -0.1)
    assert episode.stop == "accepted" and episode.attempts == 3
    assert episode.delayed == 1.0 and episode.solved
    feedback = [e.text for e in episode.history if e.kind == "feedback"]
    assert feedback[0].startswith("A confirmed generated test failed") and "10" in feedback[0]
    assert feedback[1].startswith("No program found")


@pytest.mark.parametrize("weight", [0.0, 2.0])
def test_the_test_generators_reward_has_its_own_weight(pool, tokenizer, weight):
    """Its confirmed test breaks the attempt: the solver pays the penalty (-0.5) whatever the
    weight, the test generator earns weight x 0.5."""
    policy = ScriptedPolicy(
        tokenizer,
        {"solver": [fenced(WRONG), fenced(RIGHT)], "testgen": [json_tests(("5\n", "10\n"))] * 2},
    )
    roles = {"hypothesis": "off", "solver": "policy", "testgen": "policy", "summarizer": "off"}
    episode = asyncio.run(
        runner(pool, tokenizer, policy, roles=roles, testgen_reward_weight=weight).run(
            double_problem(), 5
        )
    )
    solver = [t for t in episode.turns if t.role == "solver"]
    testgen = [t for t in episode.turns if t.role == "testgen"]
    assert solver[0].reward == pytest.approx(0.3 - 0.5)
    assert testgen[0].reward == pytest.approx(weight * 0.5)


def test_the_test_generator_is_asked_for_boundary_and_stress_cases():
    from ascent.rollout.agentic.formats import INSTRUCTIONS

    asked = INSTRUCTIONS["testgen"]
    assert "boundary cases" in asked and "stress cases" in asked and "maximal size" in asked


def test_rows_hold_policy_tokens_with_mask_one_and_observations_with_mask_zero(pool, tokenizer):
    policy = ScriptedPolicy(tokenizer, {"solver": [fenced(ECHO), fenced(RIGHT)]})
    roles = {"hypothesis": "off", "solver": "policy", "testgen": "scripted", "summarizer": "off"}
    episode = asyncio.run(runner(pool, tokenizer, policy, roles=roles).run(double_problem(), 1))
    rows = build_rows([episode], tokenizer.pad_token_id, pool_device())
    assert len(rows.rollout) == 1  # one solver thread, no summary
    mask = rows.rollout.response_mask[0]
    ids = rows.rollout.response_ids[0]
    turns = rows.token_turn[0]
    sampled = tokenizer.decode(ids[mask == 1].tolist(), skip_special_tokens=True)
    assert sampled == fenced(ECHO) + fenced(RIGHT)
    observed = tokenizer.decode(ids[(mask == 0) & (ids != tokenizer.pad_token_id)].tolist())
    # Between the two attempts: the scripted tests, the sandbox feedback and the next cue.
    assert "## Tests" in observed and "A sample test failed" in observed
    assert "## Feedback" in observed and observed.endswith("## Solution\n")
    assert set(turns[mask == 1].tolist()) == {0, 1} and set(turns[mask == 0].tolist()) == {-1}
    assert rows.rollout.logprobs[0][mask == 1].eq(-0.5).all()  # the behaviour log-probs
    assert rows.rollout.logprobs[0][mask == 0].eq(0).all()
    # What the policy was conditioned on for attempt 2 is exactly the row up to that turn.
    second = policy.contexts[1]
    prompt = rows.rollout.prompt_ids[0][rows.rollout.prompt_mask[0].bool()].tolist()
    assert second == prompt + ids[: len(second) - len(prompt)].tolist()


def test_summarizer_compresses_a_long_transcript_and_threads_restart(pool, tokenizer):
    policy = ScriptedPolicy(tokenizer, {"solver": [fenced(ECHO)] * 2 + [fenced(RIGHT)]})
    roles = {"hypothesis": "off", "solver": "policy", "testgen": "off", "summarizer": "scripted"}
    run = runner(pool, tokenizer, policy, roles=roles, summarize_threshold=250)
    header = len(
        tokenizer(run.fmt.header("solver", run.fmt.code_problem(double_problem())))["input_ids"]
    )
    assert header < 250  # the first attempt starts below the threshold ...
    episode = asyncio.run(run.run(double_problem(), 2))
    assert episode.summaries >= 1  # ... and the transcript after a failed attempt passes it
    assert [t.role for t in episode.turns][:3] == ["solver", "summarizer", "solver"]
    assert len(episode.threads) == 1 + episode.summaries  # a new solver thread per summary
    restarted = tokenizer.decode(policy.contexts[1], skip_special_tokens=True)
    assert "## Summary" in restarted and "## Feedback" not in restarted
    assert episode.delayed == 1.0


def test_without_a_summarizer_an_outgrown_context_ends_the_episode(pool, tokenizer):
    policy = ScriptedPolicy(tokenizer, {"solver": [fenced(ECHO)] * 3})
    run = runner(pool, tokenizer, policy, context_window=400, max_new_tokens=64)
    episode = asyncio.run(run.run(double_problem(), 3))
    assert episode.stop == "context" and episode.attempts < 3
    assert episode.delayed == 0.0  # the submitted program (echo) fails the hidden tests


def pool_device():
    import torch

    return torch.device("cpu")


CHAT = (
    "{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)


def test_a_chat_policy_reads_its_turns_as_chat_messages(pool, tokenizer):
    tokenizer.chat_template = CHAT
    policy = ScriptedPolicy(tokenizer, {"solver": [fenced(ECHO), fenced(RIGHT)]})
    run = runner(pool, tokenizer, policy, chat=ChatTemplate(tokenizer))
    episode = asyncio.run(run.run(double_problem(), 4))
    first, second = (tokenizer.decode(c) for c in policy.contexts)
    assert first.startswith("[system] You solve") and first.endswith("[assistant] ")
    assert "[user] ## Problem" in first
    # The next context: the first, the policy's answer and end-of-turn token, the feedback
    # as a new user message, and the opening of the next assistant turn.
    assert second.startswith(first + fenced(ECHO) + tokenizer.eos_token + "[user] ## Feedback")
    assert second.endswith("Write the program.<eos>[assistant] ")
    rows = build_rows([episode], tokenizer.pad_token_id, pool_device())
    mask = rows.rollout.response_mask[0]
    sampled = tokenizer.decode(rows.rollout.response_ids[0][mask == 1].tolist())
    assert sampled == fenced(ECHO) + "<eos>" + fenced(RIGHT) + "<eos>"
