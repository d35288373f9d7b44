"""`[agentic]`: agentic GRPO (GrandCode style): multi-role, multi-turn episodes per problem.

    [agentic]
    enabled = true
    max_turns = 6                     # hypothesis -> solve -> generate tests -> verify
    summarize_threshold = 24000       # ... -> summarize once the transcript is this long
    context_window = 32768
    immediate_reward_weight = 0.3     # A = 0.3 * A_imm + 0.7 * A_delay
    delayed_reward_weight = 0.7
    off_policy_correction = true      # min(pi_old / pi_behaviour, correction_clip)
    correction_clip = 5.0
    max_staleness = 1                 # policy versions an episode may lag behind

    [agentic.roles]                   # who plays each role: policy, api, scripted or off
    hypothesis = "api"                # an API role's model is <role>_model in [models]
    solver = "policy"
    testgen = "api"
    summarizer = "api"

The reward tiers (compiles 0.1, passes samples 0.3, passes hidden tests 1.0) are `[reward.code]`'s;
this section adds only what is agentic. Settings other sections must agree with (the
advantage estimator, KL mode, the task, the API models of API roles) are checked against the
whole config by `ascent.rules.agentic`, which `LLMConfig` runs on this section.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ascent.config.base import Section

ROLES = ("hypothesis", "solver", "testgen", "summarizer")
RoleSource = Literal["policy", "api", "scripted", "off"]


class AgenticRolesSection(Section):
    """`[agentic.roles]`: who plays each role: the trained policy, an API model, a script, none."""

    hypothesis: RoleSource = Field(
        "api", description="Proposes a structural conjecture / approach before each solve."
    )
    solver: RoleSource = Field("policy", description="Writes the program (cannot be off).")
    testgen: RoleSource = Field(
        "api",
        description="Writes adversarial tests; only tests a reference solution confirms count.",
    )
    summarizer: RoleSource = Field(
        "api",
        description="Compresses the transcript past summarize_threshold; off: an episode that "
        "outgrows context_window ends there.",
    )

    def by_source(self, source: str) -> list[str]:
        return [role for role in ROLES if getattr(self, role) == source]

    @model_validator(mode="after")
    def _solver_plays(self) -> AgenticRolesSection:
        if self.solver == "off":
            raise ValueError(
                '[agentic.roles] solver cannot be "off": every episode needs a program; '
                'use "policy", "api" or "scripted"'
            )
        return self


class AgenticSection(Section):
    """`[agentic]`: multi-role, multi-turn episodes with immediate + delayed credit (GrandCode)."""

    enabled: bool = Field(
        False, description="Train on agentic episodes instead of single completions."
    )
    max_turns: int = Field(6, ge=1, description="Solve attempts per episode, at most.")
    summarize_threshold: int = Field(
        24000,
        ge=1,
        description="Transcript tokens (policy tokenizer) past which the summarizer compresses it.",
    )
    context_window: int = Field(
        32768,
        ge=2,
        description="Longest context a policy turn may start from (with max_new_tokens added).",
    )
    immediate_reward_weight: float = Field(
        0.3, ge=0.0, description="Weight of the group-normalised per-turn (immediate) advantage."
    )
    delayed_reward_weight: float = Field(
        0.7, ge=0.0, description="Weight of the group-normalised episode (delayed) advantage."
    )
    adversarial_penalty: float = Field(
        -0.5,
        le=0.0,
        description="Added to a solve turn whose program a validated generated test breaks; "
        "the test generator's turn gets the opposite.",
    )
    testgen_reward_weight: float = Field(
        1.0,
        ge=0.0,
        description="Scales the test generator's own immediate reward (-adversarial_penalty "
        "when one of its confirmed tests breaks the attempt, else 0); acts when the policy "
        "plays testgen.",
    )
    unparsable_reward: float = Field(
        -0.1,
        le=0.0,
        description="Immediate reward of a policy turn whose output cannot be parsed (no code "
        "block, malformed tests); the turn is recorded and the episode goes on.",
    )
    max_generated_tests: int = Field(
        5, ge=1, description="Generated tests used per testgen turn (the rest are ignored)."
    )
    api_max_tokens: int = Field(4096, ge=1, description="Longest answer of an API-served role.")
    off_policy_correction: bool = Field(
        True,
        description="Weight stale rows by min(pi_old / pi_behaviour, correction_clip) in a "
        "decoupled PPO loss; false: plain PPO anchored at the behaviour policy.",
    )
    correction_clip: float = Field(
        5.0, gt=0.0, description="Cap on the off-policy importance weight."
    )
    max_staleness: int = Field(
        1,
        ge=0,
        description="Policy versions (training steps) an episode may lag behind when trained "
        "on; 0: every episode is generated by the current policy.",
    )
    max_skipped_steps: int = Field(
        3,
        ge=1,
        description="Steps in a row with no episode to train on (all unjudged by sandbox "
        "failures, or without a policy token) after which the run stops with the reasons.",
    )
    roles: AgenticRolesSection = Field(
        default_factory=AgenticRolesSection, description="Who plays each role."
    )

    @model_validator(mode="after")
    def _numbers(self) -> AgenticSection:
        summarizes = self.roles.summarizer != "off"
        if summarizes and self.summarize_threshold >= self.context_window:
            raise ValueError(
                f"[agentic] summarize_threshold ({self.summarize_threshold}) must be below "
                f"context_window ({self.context_window}), e.g. 24000 of 32768"
            )
        if self.immediate_reward_weight == 0 and self.delayed_reward_weight == 0:
            raise ValueError(
                "[agentic] immediate_reward_weight and delayed_reward_weight are both 0, so "
                "no turn gets any credit; the write-up uses 0.3 and 0.7"
            )
        return self

    @model_validator(mode="after")
    def _policy_plays(self) -> AgenticSection:
        """Training needs a role for the trained policy; `ascent eval` in agentic mode (with
        enabled = false) may serve every role by an API."""
        if self.enabled and not self.roles.by_source("policy"):
            raise ValueError(
                "[agentic.roles]: no role is played by the trained policy; "
                'set e.g. solver = "policy"'
            )
        return self

    @model_validator(mode="after")
    def _no_idle_keys(self) -> AgenticSection:
        """A key whose mechanism is switched off would do nothing: refuse it."""
        if not self.enabled:
            return self
        roles = self.roles
        idle = {
            "correction_clip": "off_policy_correction = false",
            "api_max_tokens": "no role is served by the API",
            "max_generated_tests": 'testgen = "off"',
            "adversarial_penalty": 'testgen = "off"',
            "testgen_reward_weight": "testgen not played by the policy (only its turns train)",
            "summarize_threshold": 'summarizer = "off"',
        }
        active = {
            "correction_clip": self.off_policy_correction,
            "api_max_tokens": bool(roles.by_source("api")),
            "max_generated_tests": roles.testgen != "off",
            "adversarial_penalty": roles.testgen != "off",
            "testgen_reward_weight": roles.testgen == "policy",
            "summarize_threshold": roles.summarizer != "off",
        }
        for key, why in idle.items():
            if self.explicitly_set(key) and not active[key]:
                raise ValueError(f"[agentic] {key} does nothing with {why}; remove the key")
        return self
