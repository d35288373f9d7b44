"""Config section for `ascent eval` of LLM policies: `[eval]`.

    [eval]
    problems = "ascent:code_contests_sample"   # bundled; or a path
    policy = "api"          # or "local": [model] / the run directory's checkpoint
    role = "solver"         # the [models] role that answers (policy = "api")
    num_samples = 4
    pass_k = [1, 4]

Checks that need other sections (the role exists in [models]) run when the evaluation starts,
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


class EvalSection(Section):
    """`[eval]`: which policy `ascent eval` runs on which problem set, and how it is scored."""

    problems: str = Field(
        "",
        description="JSONL problem file (.jsonl or .jsonl.gz), or a bundled set: "
        "ascent:code_contests_sample, ascent:humaneval, ascent:gsm8k_test; a relative path is "
        "looked up from the current directory, then beside the config file.",
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
        description="Cut problem statements to this many characters (0: never); only for "
        "small-context models such as ascent:tiny, which then cannot solve anything.",
    )
    rating_bands: list[tuple[int, int]] = Field(
        default_factory=lambda: list(DEFAULT_BANDS),
        description="Rating bands [low, high) of the results table (the last includes high); "
        "problems without a rating are grouped by their difficulty label.",
    )
    output_dir: str = Field(
        "",
        description="Where eval_results.json and transcripts.jsonl go; empty: "
        "RUN_DIR/eval/<problem file stem>.",
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
        return self
