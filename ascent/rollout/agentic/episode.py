"""One episode: hypothesis -> solve -> generate tests -> verify -> (summarize) -> ... -> submit.

Per attempt, up to max_turns: the hypothesis role proposes an approach, the solver writes a
program, the test generator writes tests against it, and the verifier runs the program on the
sample tests and on the generated tests the reference solution confirms. A program that passes
them all is submitted; otherwise the verdict is fed back and the next attempt starts. Before an
attempt, a transcript longer than summarize_threshold tokens is compressed by the summarizer,
and the policy's threads start again from the summary. The submitted program (the compiled one
that passed the most sample and confirmed generated tests, the latest of equals) is judged on
the hidden tests: the delayed reward.

A role output that cannot be parsed (no code block, malformed tests) is a recorded turn with
unparsable_reward, never an exception; the episode goes on without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.data import Problem
from ascent.models.prompting import continuation_ids, prompt_ids
from ascent.rewards.judge import StdioTest
from ascent.rollout.agentic.chat import ChatTemplate
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rollout.agentic.roles import ApiRoles, PolicyBatcher
from ascent.rollout.agentic.transcript import ROLE_OUTPUT, Episode, Event, PolicyThread, Turn
from ascent.rollout.agentic.verify import AttemptVerdict, Verifier


@dataclass(frozen=True)
class EpisodeSettings:
    """The numbers an episode runs by (from `[agentic]`, `[rollout]`, `[reward.code]`)."""

    roles: dict[str, str]  # role -> policy, api, scripted or off
    max_turns: int
    summarize_threshold: int
    context_window: int
    max_new_tokens: int  # of one policy turn
    adversarial_penalty: float
    unparsable_reward: float
    max_generated_tests: int
    default_language: str
    testgen_reward_weight: float = 1.0  # the test generator's reward: weight x -penalty


def reference_users(roles: Mapping[str, str]) -> list[str]:
    """The roles an episode runs a problem's reference solution for: the test generator
    (the reference confirms its tests) and the scripted solver (it submits the reference)."""
    users = []
    if roles["testgen"] != "off":
        users.append("testgen")
    if roles["solver"] == "scripted":
        users.append("solver")
    return users


class EpisodeRunner:
    """Plays episodes with the given role backends; one runner serves many episodes at once."""

    def __init__(
        self,
        settings: EpisodeSettings,
        fmt: CodeFormat,
        verifier: Verifier,
        tokenizer: PreTrainedTokenizerBase,
        policy: PolicyBatcher | None,
        api: ApiRoles | None,
        chat: ChatTemplate | None = None,
    ) -> None:
        self.s = settings
        self.chat = chat  # set: policy threads are chats in the tokenizer's template
        self.fmt = fmt
        self.verifier = verifier
        self.tokenizer = tokenizer
        self.policy = policy
        self.api = api

    def encode(self, text: str) -> list[int]:
        """Token ids of text inside a thread or transcript (no special tokens added); with a
        stand-in tokenizer (`CharEstimate`, no policy loaded) only their number means much."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    async def run(self, problem: Problem, uid: int) -> Episode:
        ep = Episode(problem, self.fmt.code_problem(problem), uid)
        if reference_users(self.s.roles) and ep.code.reference_solution and not ep.code.is_function:
            ep.reference_language = self.fmt.reference_language(problem, ep.code)
        for attempt in range(self.s.max_turns):
            ep.attempts = attempt + 1
            if self._transcript_tokens(ep) > self.s.summarize_threshold:
                await self._summarize(ep, attempt)
                if ep.stop:
                    break
            verdict = await self._attempt(ep, attempt)
            if ep.stop:
                break
            if verdict is not None and verdict.accepted:
                ep.stop = "accepted"
                break
        ep.stop = ep.stop or "max_turns"
        if ep.stop != "sandbox_error":
            await self._submit(ep)
        return ep

    # -- one attempt -------------------------------------------------------------------------

    async def _attempt(self, ep: Episode, attempt: int) -> AttemptVerdict | None:
        if self.s.roles["hypothesis"] != "off":
            hyp = await self._act(ep, "hypothesis", attempt)
            if hyp is None:
                return None
            self._check_text(hyp)
        solve = await self._act(ep, "solver", attempt)
        if solve is None:
            return None
        parsed = self.fmt.parse_solution(solve.text)
        tests_turn, tests = None, None
        if parsed is not None and self.s.roles["testgen"] != "off" and not ep.code.is_function:
            tests_turn = await self._act(ep, "testgen", attempt)
            if tests_turn is None:
                return None
            tests = self.fmt.parse_tests(tests_turn.text, self.s.max_generated_tests)
        verdict = await self._verify(ep, parsed, solve, tests_turn, tests)
        self._add_event(ep, Event("feedback", self.fmt.feedback(verdict), attempt))
        return verdict

    async def _verify(
        self,
        ep: Episode,
        parsed: tuple[str, str | None] | None,
        solve: Turn,
        tests_turn: Turn | None,
        tests: list[StdioTest] | None,
    ) -> AttemptVerdict | None:
        """Judge the attempt and give the solve and testgen turns their immediate rewards."""
        if parsed is None:
            solve.parsed, solve.reward, solve.note = False, self.s.unparsable_reward, "no program"
            return None
        code, language = parsed[0], parsed[1] or self.s.default_language
        validation = await self.verifier.validate(ep.code, tests or [], ep.reference_language)
        verdict = await self.verifier.attempt(ep.code, code, language, validation.confirmed)
        if verdict.sandbox_error:
            ep.stop, ep.detail = "sandbox_error", {"sandbox_error": verdict.sandbox_error}
            return verdict
        penalty = self.s.adversarial_penalty if verdict.broken else 0.0
        solve.reward, solve.broken = verdict.tier + penalty, verdict.broken
        solve.note = "broken by a confirmed generated test" if verdict.broken else ""
        if tests_turn is not None:
            tests_turn.tests_proposed = validation.proposed
            tests_turn.tests_confirmed = len(validation.confirmed)
            tests_turn.note = f"{len(validation.confirmed)}/{validation.proposed} confirmed"
            if validation.hidden_copies:
                tests_turn.note += f" ({validation.hidden_copies} copied a hidden test's input)"
            if tests is None:
                tests_turn.parsed, tests_turn.reward = False, self.s.unparsable_reward
                tests_turn.note = "no tests could be read"
            else:
                tests_turn.reward = -penalty * self.s.testgen_reward_weight
        # Submit the best attempt: compiled and passing the samples, then the most tests
        # passed; the latest of equals (it read the most feedback).
        rank = (int(verdict.compiled and verdict.samples_ok is not False), verdict.passed)
        if (verdict.compiled and rank >= ep.program_rank) or ep.program is None:
            ep.program, ep.program_rank = (code, language), rank
        return verdict

    async def _submit(self, ep: Episode) -> None:
        if ep.program is None:
            ep.delayed, ep.detail = 0.0, {"status": "no program"}
            return
        verdict = await self.verifier.final(ep.code, *ep.program)
        ep.delayed = self.verifier.delayed_reward(verdict)
        ep.solved = self.verifier.solved(verdict)
        ep.detail = {"status": verdict.status, "passed": verdict.passed, "total": verdict.total}

    async def _summarize(self, ep: Episode, attempt: int) -> None:
        if self.s.roles["summarizer"] == "off":
            return
        turn = await self._act(ep, "summarizer", attempt)
        if turn is None:
            return
        self._check_text(turn)
        ep.events = ep.events[-1:]  # the summary replaces the transcript
        ep.close_threads()
        ep.summaries += 1

    # -- roles -------------------------------------------------------------------------------

    def _check_text(self, turn: Turn) -> None:
        if not turn.text.strip():
            turn.parsed, turn.reward, turn.note = False, self.s.unparsable_reward, "empty"

    def _add_event(self, ep: Episode, event: Event) -> None:
        ep.events.append(event)
        ep.history.append(event)

    async def _act(self, ep: Episode, role: str, attempt: int) -> Turn | None:
        """The role's output as a Turn (added to the transcript); None when the policy's
        context has no room left for it (the episode stops: `context`)."""
        source = self.s.roles[role]
        if source == "policy":
            turn = await self._policy_turn(ep, role, attempt)
            if turn is None:
                ep.stop = "context"
                return None
        elif source == "api":
            assert self.api is not None
            messages = self.fmt.messages(role, ep.code, ep.events)
            text, tokens, note = await self.api.generate(role, messages)
            turn = Turn(role, "api", attempt, text, tokens=tokens, note=note)
            ep.add_turn(turn)
        else:
            text = self.fmt.scripted(role, ep)
            turn = Turn(role, "scripted", attempt, text, tokens=len(self.encode(text)))
            ep.add_turn(turn)
        self._add_event(ep, Event(ROLE_OUTPUT[role], turn.text, attempt))
        thread = ep.open_threads.get(role)
        if thread is not None:  # its own output is already in the thread, as sampled tokens
            thread.cursor = len(ep.events)
        return turn

    async def _policy_turn(self, ep: Episode, role: str, attempt: int) -> Turn | None:
        assert self.policy is not None
        thread = ep.open_threads.get(role)
        new = [e for e in ep.events[thread.cursor if thread else 0 :] if self.fmt.visible(role, e)]
        if thread is None:
            thread, ids = self._open_thread(ep, role, new), []
        else:
            ids = continuation_ids(self.tokenizer, self._observation(ep, thread, new))
        if len(thread.context) + len(ids) + self.s.max_new_tokens > self.s.context_window:
            return None
        thread.observe(ids)
        thread.cursor = len(ep.events)
        out = await self.policy.generate(thread.context)
        turn = Turn(role, "policy", attempt, out.text, tokens=len(out.ids), version=out.version)
        thread.act(out.ids, out.logprobs, ep.add_turn(turn), out.finished)
        thread.last_text = out.text
        thread.last_end = self.tokenizer.decode(out.ids[-1:]) if out.finished else ""
        return turn

    def _open_thread(self, ep: Episode, role: str, events: list[Event]) -> PolicyThread:
        """A new thread whose prompt is the role's first context (with what it sees so far)."""
        if self.chat is not None:
            messages = self.fmt.messages(role, ep.code, events)
            thread = PolicyThread(role, prompt_ids(self.tokenizer, [self.chat.start(messages)])[0])
            thread.messages = messages
        else:
            text = self.fmt.header(role, ep.code)
            text += "".join(self.fmt.render(e, ep.code) for e in events)
            text += self.fmt.cue(role, ep.code, after_header=not events)
            thread = PolicyThread(role, prompt_ids(self.tokenizer, [text])[0])
        ep.threads.append(thread)
        ep.open_threads[role] = thread
        return thread

    def _observation(self, ep: Episode, thread: PolicyThread, events: list[Event]) -> str:
        """The text between the thread's last policy turn and its next one."""
        if self.chat is None or thread.messages is None:
            observed = "".join(self.fmt.render(e, ep.code) for e in events)
            return observed + self.fmt.cue(thread.role, ep.code, after_header=False)
        user = {"role": "user", "content": self.fmt.update(thread.role, ep.code, events).lstrip()}
        text = self.chat.continuation(thread.messages, thread.last_text, user, thread.last_end)
        thread.messages = [
            *thread.messages,
            {"role": "assistant", "content": thread.last_text},
            user,
        ]
        return text

    def _transcript_tokens(self, ep: Episode) -> int:
        """Tokens of the transcript as the solver would read it (policy tokenizer)."""
        text = self.fmt.header("solver", ep.code)
        text += "".join(
            self.fmt.render(e, ep.code) for e in ep.events if self.fmt.visible("solver", e)
        )
        return len(self.encode(text))
