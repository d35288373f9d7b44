"""What an episode is made of: transcript events, turns, the policy's token threads.

An episode's transcript is a list of `Event`s (a hypothesis, a solution, tests, verifier
feedback, a summary) that every role reads. Each role output is also a `Turn`, which carries
the immediate reward it earned. Where the trained policy plays a role, its view of the episode
is a `PolicyThread`: the exact token sequence it was conditioned on and produced, with
`mask` 1 on the tokens it sampled (and their behaviour log-probs) and 0 on the observation
tokens (other roles' outputs, sandbox feedback) appended between its turns. A summary starts
new threads; each thread becomes one training row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ascent.data import Problem
from ascent.data.code_problems import CodeProblem

EVENT_KINDS = ("hypothesis", "solution", "tests", "feedback", "summary")
ROLE_OUTPUT = {
    "hypothesis": "hypothesis",
    "solver": "solution",
    "testgen": "tests",
    "summarizer": "summary",
}


@dataclass(frozen=True)
class Event:
    kind: str  # one of EVENT_KINDS
    text: str
    turn: int  # the solve attempt (0-based) it belongs to


@dataclass
class Turn:
    """One role output."""

    role: str
    source: str  # policy, api or scripted
    attempt: int  # 0-based solve attempt of the episode
    text: str
    parsed: bool = True  # False: the output could not be parsed (recorded, penalised)
    reward: float = 0.0  # immediate reward (only policy turns are trained on)
    tokens: int = 0  # tokens generated (policy / API) or, for a script, in the policy tokenizer
    version: int | None = None  # policy version that generated it (policy turns)
    note: str = ""  # why it was penalised, an API error, ...
    broken: bool = False  # solve turns: a confirmed generated test broke the program
    tests_proposed: int = 0  # testgen turns: tests read from its output
    tests_confirmed: int = 0  # ... of which the reference solution confirmed

    def to_json(self) -> dict[str, Any]:
        out = {
            "role": self.role,
            "source": self.source,
            "attempt": self.attempt,
            "text": self.text,
            "parsed": self.parsed,
            "reward": self.reward,
            "tokens": self.tokens,
        }
        if self.role == "testgen":
            out |= {"tests_proposed": self.tests_proposed, "tests_confirmed": self.tests_confirmed}
        if self.role == "solver":
            out["broken"] = self.broken
        return out | ({"note": self.note} if self.note else {})


@dataclass
class PolicyThread:
    """The trained policy's token stream for one role between summaries (one training row)."""

    role: str
    prompt: list[int]  # the first context: the role's header (and the summary so far)
    response: list[int] = field(default_factory=list)  # sampled and observation tokens
    mask: list[float] = field(default_factory=list)  # 1 on sampled tokens, 0 on observations
    logprobs: list[float] = field(default_factory=list)  # behaviour log-probs; 0 off the mask
    turn_of: list[int] = field(default_factory=list)  # the Turn index of each token (-1: obs)
    cursor: int = 0  # events already in the thread
    finished: bool = True  # the last policy turn ended with EOS
    messages: list[dict[str, Any]] | None = None  # the chat so far (chat-template policies)
    last_text: str = ""  # the policy's last answer, decoded
    last_end: str = ""  # the end-of-turn token it sampled ('' when cut by max_new_tokens)

    @property
    def context(self) -> list[int]:
        return self.prompt + self.response

    def observe(self, ids: list[int]) -> None:
        self.response += ids
        self.mask += [0.0] * len(ids)
        self.logprobs += [0.0] * len(ids)
        self.turn_of += [-1] * len(ids)

    def act(self, ids: list[int], logprobs: list[float], turn: int, finished: bool) -> None:
        self.response += ids
        self.mask += [1.0] * len(ids)
        self.logprobs += logprobs
        self.turn_of += [turn] * len(ids)
        self.finished = finished

    @property
    def policy_tokens(self) -> int:
        return int(sum(self.mask))


@dataclass
class Episode:
    """One problem worked through by the roles: transcript, turns, rows and outcome."""

    problem: Problem
    code: CodeProblem  # the problem's code view (tests, reference solution)
    uid: int  # the problem draw's id: the G episodes of one problem share it (GRPO group)
    events: list[Event] = field(default_factory=list)  # what roles read now (since a summary)
    history: list[Event] = field(default_factory=list)  # every event, for the transcript log
    turns: list[Turn] = field(default_factory=list)
    threads: list[PolicyThread] = field(default_factory=list)  # closed and open, in order
    open_threads: dict[str, PolicyThread] = field(default_factory=dict)
    attempts: int = 0  # solve attempts made
    summaries: int = 0
    reference_language: str | None = None  # of the reference solution, when tests need it
    program: tuple[str, str] | None = None  # the program submitted: (code, language)
    program_rank: tuple[int, int] = (-1, -1)  # (compiled and samples ok, tests passed) of it
    delayed: float | None = None  # hidden-test reward of the submitted program; None: unjudged
    solved: bool = False
    stop: str = ""  # accepted, max_turns, context, no_program
    detail: dict[str, Any] = field(default_factory=dict)  # final verdict, for the transcript

    def add_turn(self, turn: Turn) -> int:
        self.turns.append(turn)
        return len(self.turns) - 1

    def close_threads(self) -> None:
        self.open_threads = {}

    @property
    def min_version(self) -> int | None:
        versions = [t.version for t in self.turns if t.version is not None]
        return min(versions) if versions else None

    @property
    def valid(self) -> bool:
        """Judged (no sandbox failure) and holding at least one policy token to train on."""
        return self.delayed is not None and any(t.policy_tokens for t in self.threads)

    def to_json(self) -> dict[str, Any]:
        return {
            "problem": self.problem.key,
            "group": self.uid,
            "attempts": self.attempts,
            "summaries": self.summaries,
            "stop": self.stop,
            "delayed_reward": self.delayed,
            "solved": self.solved,
            "min_version": self.min_version,
            "turns": [t.to_json() for t in self.turns],
            "transcript": [{"kind": e.kind, "turn": e.turn, "text": e.text} for e in self.history],
            "final": self.detail,
        }
