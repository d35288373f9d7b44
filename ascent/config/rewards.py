"""Config sections for rewards and the code sandbox: `[reward]` and `[sandbox]`."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ascent.config.base import Section


class MathRewardSection(Section):
    """`[reward.math]`: answer extraction and equivalence checking for math problems."""

    correct_reward: float = Field(1.0, description="Reward for an answer equivalent to the gold.")
    wrong_reward: float = Field(-1.0, description="Reward for a wrong answer.")
    missing_reward: float | None = Field(
        None,
        description="Reward when no answer can be extracted or parsed; unset: wrong_reward.",
    )
    answer_pattern: str = Field(
        "",
        description="Regex whose first group captures the answer (last match wins); "
        "empty: the last \\boxed{...}.",
    )
    answer_is_fallback: bool = Field(
        True, description="When no pattern matches, accept a final 'the answer is X'."
    )
    timeout_s: float = Field(
        5.0,
        gt=0.0,
        description="Seconds (rounded up) math-verify may spend on each step of checking one "
        "answer; over it, the answer is wrong.",
    )
    workers: int = Field(
        1, ge=1, description="Processes that run math-verify (its own timeout needs a main thread)."
    )

    @field_validator("answer_pattern")
    @classmethod
    def _pattern_compiles(cls, value: str) -> str:
        if not value:
            return value
        try:
            compiled = re.compile(value)
        except re.error as err:
            raise ValueError(f"answer_pattern {value!r} is not a valid regex: {err}") from None
        if compiled.groups < 1:
            raise ValueError(
                f"answer_pattern {value!r} needs a capture group around the answer, "
                r"e.g. 'Answer: (\S+)'"
            )
        return value


class CodeRewardSection(Section):
    """`[reward.code]`: the tiered code reward (compiles / passes samples / passes all tests)."""

    compile_reward: float = Field(0.1, description="Reward when the program compiles.")
    sample_reward: float = Field(0.3, description="Reward when it also passes the sample tests.")
    pass_reward: float = Field(1.0, description="Reward when it passes every hidden test.")
    compile_error_reward: float = Field(
        0.0, description="Reward when it does not compile (or has no code at all)."
    )
    partial_credit: bool = Field(
        False,
        description="Add fraction-of-hidden-tests-passed credit: max(tier, pass_reward * "
        "passed / total); needs test_policy = 'run_all'.",
    )
    test_policy: Literal["stop_at_first_failure", "run_all"] = Field(
        "stop_at_first_failure",
        description="Stop a program's tests at its first failure, or run them all (for logging).",
    )
    float_tolerance: float = Field(
        0.0,
        ge=0.0,
        description="Numeric tokens may differ by this much, absolute or relative; 0: exact.",
    )
    default_language: Literal["python", "cpp"] = Field(
        "python", description="Language when neither the row nor the code fence names one."
    )

    @model_validator(mode="after")
    def _partial_credit_runs_all(self) -> CodeRewardSection:
        if self.partial_credit and self.test_policy != "run_all":
            raise ValueError(
                "[reward.code] partial_credit = true needs every test run; "
                "set test_policy = 'run_all'"
            )
        return self


class ReasoningGymRewardSection(Section):
    """`[reward.reasoning_gym]`: how the answer is read before reasoning-gym scores it."""

    answer_format: Literal["tag", "text", "last_number"] = Field(
        "tag",
        description="tag: the last <answer>...</answer> of the completion, as reasoning-gym's "
        "own evaluations read it; text: the whole completion, stripped (a model prompted to "
        "reply with the answer alone); last_number: the last number in it (generators whose "
        "answers are numbers, for a model that states them in a sentence).",
    )


class RewardSection(Section):
    """`[reward]`: which reward functions score completions, and their settings."""

    functions: list[str] = Field(
        default_factory=lambda: ["math"],
        min_length=1,
        description="Registered reward names (math, code, ...) or 'package.module:function' paths.",
    )
    weights: list[float] = Field(
        default_factory=list,
        description="One weight per function for the total reward; empty: all 1.0.",
    )
    math: MathRewardSection = Field(
        default_factory=MathRewardSection, description="Math answer checking."
    )
    code: CodeRewardSection = Field(
        default_factory=CodeRewardSection, description="Tiered code reward."
    )
    reasoning_gym: ReasoningGymRewardSection = Field(
        default_factory=ReasoningGymRewardSection,
        description="reasoning-gym's scorers (problems from [data] path = 'reasoning_gym:NAME').",
    )

    @model_validator(mode="after")
    def _one_weight_per_function(self) -> RewardSection:
        if self.weights and len(self.weights) != len(self.functions):
            raise ValueError(
                f"[reward] weights has {len(self.weights)} values for {len(self.functions)} "
                f"functions; give one weight per function or leave weights empty"
            )
        if len(set(self.functions)) != len(self.functions):
            raise ValueError("[reward] functions lists the same reward twice; list each once")
        return self


class SandboxSection(Section):
    """`[sandbox]`: isolation and limits for running model-written programs."""

    unsafe_local: bool = Field(
        False,
        description="Run programs without isolation (time, memory, output limits only): "
        "for trusted code only.",
    )
    workers: int = Field(0, ge=0, description="Programs run in parallel; 0: one per CPU core.")
    time_limit_ms: int = Field(
        2000, ge=1, description="CPU time per run (a row's time_limit_ms column overrides it)."
    )
    wall_limit_factor: float = Field(
        2.0,
        ge=1.0,
        description="Wall-clock limit per run, as a multiple of its CPU time limit; time spent "
        "waiting for a CPU on a busy machine does not count (up to 10 times the limit).",
    )
    memory_mb: int = Field(
        512,
        ge=16,
        description="Memory per run: the address-space limit of each process and, where the "
        "workers get a cgroup (root, or a delegated cgroup), of all its processes and files "
        "together.",
    )
    stack_mb: int = Field(
        64,
        ge=1,
        description="Stack limit per run, within memory_mb (C/C++ threads reserve this much each).",
    )
    max_processes: int = Field(
        16, ge=1, description="Processes and threads a run may have at once."
    )
    max_open_files: int = Field(64, ge=8, description="Open file descriptors per process.")
    output_limit_kb: int = Field(
        16384, ge=1, description="Largest stdout (and any file) a run may write."
    )
    tmp_size_mb: int = Field(
        256, ge=1, description="Size of each worker's private temporary filesystem."
    )
    compile_time_limit_ms: int = Field(
        30000, ge=1, description="CPU time for compiling one program."
    )
    compile_memory_mb: int = Field(
        2048, ge=64, description="Address-space (and binary size) limit for compiling."
    )
    cpp_compiler: str = Field("g++", description="C++ compiler, found on PATH.")
    cpp_flags: list[str] = Field(
        default_factory=lambda: ["-O2", "-std=c++17"], description="C++ compiler flags."
    )
    run_uid: int = Field(
        60000,
        ge=1,
        description="When ascent runs as root, programs run as uids from run_uid upwards that "
        "own no files: two per worker (the program, its call-a-function tests), held "
        "host-wide by lock files in /run/ascent-sandbox.",
    )

    @model_validator(mode="after")
    def _stack_within_memory(self) -> SandboxSection:
        if self.stack_mb > self.memory_mb:
            raise ValueError(
                f"[sandbox] stack_mb ({self.stack_mb}) cannot exceed memory_mb ({self.memory_mb})"
            )
        return self
