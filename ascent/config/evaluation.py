"""Config section for `ascent eval` of LLM policies: `[eval]`.

    [eval]
    problems = "ascent:code_contests_sample"   # bundled; or a path
    policy = "api"          # or "local": [model] / the run directory's checkpoint
    role = "solver"         # the [models] role that answers (policy = "api")
    num_samples = 4
    pass_k = [1, 4]

    [eval]                  # the evaluation round of agentic GRPO
    problems = "ascent:code_contests_rated"
    mode = "agentic"        # one episode per problem, roles from [agentic.roles]: pass rate
                            # at the first attempt and after feedback
    rating_bands = [[0, 1200], [1200, 1800]]
    only_bands = true       # evaluate only the problems rated inside those bands

    [eval.test_time_rl]     # with mode = "agentic": a few GRPO updates per problem on the
    enabled = true          # policy's own attempts (scored on sample tests and confirmed
    steps = 4               # generated tests, never the hidden ones) before it answers;
    group_size = 8          # pass@1 without and with, on the same problems
    lr = 1e-6

Checks that need other sections (the role exists in [models], agentic roles and the local
policy agree, the test-time updates' roles and algorithm) run when the evaluation starts,
before any request is sent.
"""

from __future__ import annotations

import itertools
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ascent.config.base import Section

DEFAULT_BANDS = [(0, 1200), (1200, 1800), (1800, 2400), (2400, 4000)]
PROBLEM_PLACEHOLDER = "{problem}"
_ROLE = re.compile(r"^[a-z][a-z0-9_]*$")
HELD_OUT = "data:held_out"  # [eval] problems: the [data] section's held-out split


class TestTimeRLSection(Section):
    """`[eval.test_time_rl]`: GRPO updates on the policy's own attempts before it answers.

    Attempts are scored on sample tests and confirmed generated tests, never hidden ones;
    what is refused with other sections is checked when the evaluation starts
    (`ascent.evaluation.test_time_run`)."""

    enabled: bool = Field(
        False,
        description="Before answering, adapt the local policy to each problem (or band) with "
        "GRPO on its own attempts, scored only on the sample tests and generated tests "
        "(see labels; never the hidden tests); report pass@1 (one greedy "
        'answer) without and with it. Needs mode = "agentic" and policy = "local".',
    )
    labels: Literal["vote", "oracle"] = Field(
        "vote",
        description="What tells a right attempt from a wrong one, besides the sample tests. "
        "vote (what a contestant has): no reference solution and no expected output of a "
        "generated test is used; every attempt of an update is run on the sample inputs and "
        "the generated tests' inputs (the empty input when there are none) and an attempt "
        "whose output differs from the most common one (given by at least 2 attempts and "
        "vote_min_share of those that ran, no tie) counts as broken: majority-vote test-time "
        "RL. oracle: the generated tests the problem's reference solution confirms (a "
        "contestant with a correct brute-force checker: an upper bound, not a contest result; "
        'warned about at load; "reference" is its old name).',
    )
    vote_min_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="labels = vote: the share of the attempts that ran which must agree on an "
        "output for it to count as the answer on that input (0: any clear plurality of at "
        "least 2). Below it the group carries no label there and the update is skipped: a "
        "weak majority is wrong more often than a strong one, and training towards it only "
        "sharpens the mistake (on the tiny task 0.5 lost 1.5 points where 0 lost 3.5).",
    )

    @field_validator("labels", mode="before")
    @classmethod
    def _old_label_name(cls, value: object) -> object:
        return "oracle" if value == "reference" else value  # its name until 2026-12

    scope: Literal["problem", "band"] = Field(
        "problem",
        description="problem: the original weights are restored after every problem; band: "
        "updates carry over from problem to problem within a band of the results table (in "
        "file order) and the weights are restored between bands.",
    )
    steps: int = Field(
        4,
        ge=1,
        description="GRPO updates per problem: each samples group_size fresh attempts from "
        "the current weights and takes one optimiser step on them (skipped when every attempt "
        "scores the same: no signal).",
    )
    group_size: int = Field(
        8,
        ge=2,
        description="Attempts per update (one GRPO group; at least 2: a lone attempt has no "
        "baseline).",
    )
    lr: float = Field(
        1e-6,
        gt=0.0,
        description="Learning rate of the test-time updates (constant; AdamW with [optim] "
        "betas, eps and weight_decay, fresh whenever the weights are restored).",
    )
    temperature: float = Field(
        1.0,
        gt=0.0,
        le=2.0,
        description="Sampling temperature of the attempts (the loss uses the same); the "
        "answers are greedy.",
    )

    @model_validator(mode="after")
    def _idle_when_off(self) -> TestTimeRLSection:
        if self.labels != "vote" and self.explicitly_set("vote_min_share"):
            raise ValueError(
                '[eval.test_time_rl] vote_min_share acts only with labels = "vote"; remove '
                'the key or set labels = "vote"'
            )
        if not self.enabled:
            keys = [k for k in type(self).model_fields if k != "enabled"]
            for key in keys:
                if self.explicitly_set(key):
                    raise ValueError(
                        f"[eval.test_time_rl] {key} does nothing while test-time RL is off; "
                        "set enabled = true or remove the key"
                    )
        return self


class EvalSection(Section):
    """`[eval]`: which policy `ascent eval` runs on which problem set, and how it is scored."""

    mode: Literal["single", "agentic"] = Field(
        "single",
        description="single: num_samples independent completions per problem (pass@k); "
        "agentic: one multi-role episode per code problem (hypothesis -> solver -> test "
        "generator -> verify -> summarize, up to [agentic] max_turns; roles from "
        "[agentic.roles]), the submitted program judged on the hidden tests, reported at the "
        "first attempt and after feedback.",
    )
    problems: str = Field(
        "",
        description="JSONL problem file (.jsonl or .jsonl.gz), or a bundled set: "
        "ascent:code_contests_sample, ascent:code_contests_rated, ascent:humaneval, "
        "ascent:gsm8k_test; a relative path is "
        "looked up from the current directory, then beside the config file. "
        f'"{HELD_OUT}" (test-time RL only): the held-out split of [data] (eval_size '
        "problems of a built-in task such as arithmetic, or of [data] path), seen through "
        "its agentic format.",
    )
    format: Literal["auto", "code_contests", "humaneval", "code", "math"] = Field(
        "auto",
        description="Row format; auto: detected from the first row's fields "
        "(content+test, prompt+entry_point, statement, question+answer).",
    )
    limit: int = Field(0, ge=0, description="Evaluate only the first N problems (0: all).")
    policy: Literal["local", "api"] = Field(
        "local",
        description="local: [model] (or the run directory's checkpoint) in this process; "
        "api: the [models] role named by `role` (a served model is api on loopback).",
    )
    role: str = Field("solver", description="The [models] role that answers (policy = 'api').")
    num_samples: int = Field(1, ge=1, description="Completions per problem (the n of pass@k).")
    pass_k: list[int] = Field(
        default_factory=lambda: [1],
        min_length=1,
        description="k values of unbiased pass@k to report; each at most num_samples.",
    )
    temperature: float | None = Field(
        None,
        ge=0.0,
        le=2.0,
        description="Sampling temperature (0: greedy, only with num_samples = 1); unset: "
        "not sent, the endpoint's default (1.0 locally and for ascent serve).",
    )
    top_p: float | None = Field(
        None, gt=0.0, le=1.0, description="Nucleus sampling threshold; unset: not sent (1.0)."
    )
    max_new_tokens: int = Field(
        2048, ge=1, description="Longest completion, in tokens (R1-Zero: 2048 code, 4096 math)."
    )
    language: Literal["python", "cpp"] = Field(
        "python",
        description="Language the prompt asks for and code without a fence tag is judged as.",
    )
    prompt_template: str = Field(
        "",
        description="Prompt with {problem} (and optionally {language}); empty: the built-in "
        "prompt for the problem kind (stdin/stdout, function, math).",
    )
    max_problem_chars: int = Field(
        0,
        ge=0,
        description="Cut problem statements (agentic mode: the statement with its sample "
        "tests, as roles read it) to this many characters (0: never); only for small-context "
        "models such as ascent:tiny, which then cannot solve anything.",
    )
    role_instructions: bool = Field(
        True,
        description="Agentic mode: send each role its built-in instructions (a system "
        "message); false: only the problem, the transcript and the request, for small-context "
        "models such as ascent:tiny.",
    )
    rating_bands: list[tuple[int, int]] = Field(
        default_factory=lambda: list(DEFAULT_BANDS),
        description="Rating bands [low, high) of the results table (the last includes high); "
        "problems without a rating are grouped by their difficulty label.",
    )
    only_bands: bool = Field(
        False,
        description="Evaluate only the problems whose rating lies in a rating band; those "
        "without a rating or outside every band are skipped and counted (limit then counts "
        "the problems kept).",
    )
    output_dir: str = Field(
        "",
        description="Where eval_results.json and transcripts.jsonl go; empty: "
        "RUN_DIR/eval/<problem file stem> (held_out for data:held_out).",
    )
    test_time_rl: TestTimeRLSection = Field(
        default_factory=TestTimeRLSection,
        description="Test-time RL before answering (agentic mode, local policy).",
    )

    @field_validator("pass_k")
    @classmethod
    def _distinct_positive(cls, value: list[int]) -> list[int]:
        if any(k < 1 for k in value):
            raise ValueError("[eval] pass_k: every k must be at least 1, e.g. pass_k = [1, 5]")
        if len(set(value)) != len(value):
            raise ValueError("[eval] pass_k lists the same k twice; list each once")
        return sorted(value)

    @field_validator("rating_bands")
    @classmethod
    def _ordered_bands(cls, value: list[tuple[int, int]]) -> list[tuple[int, int]]:
        for low, high in value:
            if low >= high:
                raise ValueError(
                    f"[eval] rating_bands: band [{low}, {high}] is empty; write [low, high] "
                    "with low < high"
                )
        for (_, high), (low, _) in itertools.pairwise(value):
            if low < high:
                raise ValueError(
                    "[eval] rating_bands: bands must be in increasing order and must not "
                    f"overlap ({high} > {low}), e.g. [[0, 1200], [1200, 1800]]"
                )
        return value

    @field_validator("role")
    @classmethod
    def _role_name(cls, value: str) -> str:
        if not _ROLE.match(value):
            raise ValueError(
                f"[eval] role: {value!r} is not a role name (lowercase letters, digits, _), "
                'e.g. role = "solver"'
            )
        return value

    @field_validator("prompt_template")
    @classmethod
    def _has_problem(cls, value: str) -> str:
        if value and PROBLEM_PLACEHOLDER not in value:
            raise ValueError(
                "[eval] prompt_template must contain {problem}, where the problem statement "
                "goes (and may contain {language})"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EvalSection:
        too_big = [k for k in self.pass_k if k > self.num_samples]
        if too_big:
            raise ValueError(
                f"[eval] pass_k: pass@{too_big[0]} needs at least {too_big[0]} samples per "
                f"problem (num_samples = {self.num_samples}); raise num_samples or drop "
                f"{too_big[0]} from pass_k"
            )
        if self.temperature == 0 and self.num_samples > 1:
            raise ValueError(
                f"[eval] temperature: 0 (greedy) gives {self.num_samples} identical samples; "
                "set temperature > 0 (e.g. 0.8) for pass@k, or num_samples = 1"
            )
        if self.policy == "local" and self.explicitly_set("role"):
            raise ValueError(
                "[eval] role: only policy = 'api' uses a [models] role; remove the key or "
                'set policy = "api"'
            )
        if self.mode == "agentic":
            self._agentic_keys()
        elif self.explicitly_set("role_instructions"):
            raise ValueError(
                '[eval] role_instructions: only mode = "agentic" has roles; remove the key'
            )
        self._test_time_keys()
        return self

    def _test_time_keys(self) -> None:
        """What test-time RL needs of [eval], and the [eval] keys it has no use for."""
        if not self.test_time_rl.enabled:
            if self.problems == HELD_OUT:
                raise ValueError(
                    f'[eval] problems: "{HELD_OUT}" is read only by test-time RL; set '
                    "[eval.test_time_rl] enabled = true, or name a problem file"
                )
            return
        if self.mode != "agentic":
            raise ValueError(
                "[eval.test_time_rl]: test-time RL scores attempts the way agentic episodes "
                "do (sample tests, generated tests confirmed by the reference solution); set "
                '[eval] mode = "agentic"'
            )
        if self.policy == "api":
            raise ValueError(
                "[eval.test_time_rl]: test-time RL updates the policy's weights, and an API "
                'policy has none here; set [eval] policy = "local" (the run directory, '
                "--checkpoint or [model]), or enabled = false"
            )

    def _agentic_keys(self) -> None:
        """Keys single completions use that an agentic episode has no place for."""
        why = {
            "num_samples": "it runs one episode per problem; remove the key (or set it to 1)",
            "pass_k": "it reports pass at the first attempt and after feedback; remove the key",
            "role": "its roles are [agentic.roles] (an API role's model is <role>_model in "
            "[models]); remove the key",
            "prompt_template": "each role reads its own prompt; remove the key (for a "
            "small-context model: role_instructions = false and max_problem_chars)",
        }
        for key, reason in why.items():
            if self.explicitly_set(key):
                raise ValueError(f'[eval] {key}: mode = "agentic" does not use it: {reason}')
