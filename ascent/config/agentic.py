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
whole config by `check_agentic`, which `LLMConfig` runs on this section.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, model_validator

from ascent.config import names
from ascent.config.base import Section

ROLES = ("hypothesis", "solver", "testgen", "summarizer")
RoleSource = Literal["policy", "api", "scripted", "off"]
GROUP_ADVANTAGES = ("grpo", "dr_grpo")  # grpo: (r - mean) / (std + eps); dr_grpo: r - mean


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
            "summarize_threshold": 'summarizer = "off"',
        }
        active = {
            "correction_clip": self.off_policy_correction,
            "api_max_tokens": bool(roles.by_source("api")),
            "max_generated_tests": roles.testgen != "off",
            "adversarial_penalty": roles.testgen != "off",
            "summarize_threshold": roles.summarizer != "off",
        }
        for key, why in idle.items():
            if self.explicitly_set(key) and not active[key]:
                raise ValueError(f"[agentic] {key} does nothing with {why}; remove the key")
        return self


# Single-completion features the agentic step does not implement: (section, key, off value).
NOT_AGENTIC = (
    ("algorithm", "nll_coef", 0.0),
    ("algorithm", "overlong", "off"),
    ("sampling", "dynamic", False),
    ("sampling", "history_resampling", False),
    ("sampling", "replay_ratio", 0.0),
)


def _refuse_foreign(section: AgenticSection, data: dict[str, Any]) -> None:
    """Settings of other sections that agentic episodes cannot honour."""
    for name, key, off in NOT_AGENTIC:
        value = getattr(data.get(name), key, off)
        if value != off:
            raise ValueError(
                f"[{name}] {key}: agentic episodes do not support it (it shapes single "
                f"completions); set {key} = {off!r} or turn [agentic] off".replace("'", '"')
            )
    alg, rollout = data.get("algorithm"), data.get("rollout")
    if alg is not None:
        if alg.advantage not in GROUP_ADVANTAGES:
            raise ValueError(
                f"[algorithm] advantage: agentic credit normalises rewards over the episodes "
                f"of one problem, so it must be grpo or dr_grpo (not '{alg.advantage}')"
            )
        if alg.kl_coef > 0 and alg.kl_mode != "loss":
            raise ValueError(
                "[algorithm] kl_mode: agentic credit is per turn, so KL must be a loss term; "
                'set kl_mode = "loss"'
            )
        if alg.is_cap is not None:
            raise ValueError(
                "[algorithm] is_cap: agentic runs cap the off-policy weight with [agentic] "
                "correction_clip (and off_policy_correction = true); remove is_cap"
            )
    if rollout is None:
        return
    if rollout.engine != "transformers":
        raise ValueError(
            "[rollout] engine: the trained policy plays its roles in this process; "
            'use "transformers"'
        )
    if section.off_policy_correction and (rollout.top_k or rollout.top_p < 1.0):
        # The rollout records log-probs of the untruncated policy (ascent.rollout.sampling),
        # not of the truncated distribution the tokens were drawn from, so the weight
        # pi_old / pi_behaviour would not correct for the sampling.
        raise ValueError(
            "[rollout] top_k / top_p: the recorded behaviour log-probs are of the untruncated "
            "policy, so off_policy_correction would weight tokens by the wrong behaviour "
            "probability; set top_k = 0 and top_p = 1.0, or [agentic] off_policy_correction = "
            "false"
        )


def format_name(data: Any) -> str | None:
    """The episode format of a `[data]` section: code for data files, else the task's name."""
    if data is None:
        return None
    return "code" if getattr(data, "path", None) is not None else data.task


def _check_task_and_roles(section: AgenticSection, data: dict[str, Any]) -> None:
    name = format_name(data.get("data"))
    if name is not None and name not in names.AGENTIC_FORMATS:
        raise ValueError(
            f"[data] task: agentic episodes need problems with a code view; '{name}' has none "
            "(use arithmetic, or code problems from [data] path)"
        )
    models = data.get("models")
    if models is None:
        return
    named = {role for role, (model, _) in models.roles().items() if model}
    for role in section.roles.by_source("api"):
        if role not in named:
            raise ValueError(
                f'[agentic.roles] {role} = "api" needs a model: add {role}_model = "name" to '
                f'[models], or set {role} = "scripted" or "off"'
            )


def check_agentic(section: AgenticSection, info: ValidationInfo) -> AgenticSection:
    """Cross-section rules, run by `LLMConfig` on its `agentic` field (earlier sections are in
    `info.data`; one that failed its own validation is absent and left to its own error)."""
    if section.enabled:
        _refuse_foreign(section, info.data)
        _check_task_and_roles(section, info.data)
    return section


AgenticField = Annotated[AgenticSection, AfterValidator(check_agentic)]
