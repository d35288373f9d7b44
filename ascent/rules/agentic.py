"""What agentic episodes need of the other sections, checked on the `[agentic]` field of
`LLMConfig` (earlier sections are in `info.data`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, ValidationInfo

from ascent import names
from ascent.config.agentic import AgenticSection
from ascent.rules.roles import named_roles

GROUP_ADVANTAGES = ("grpo", "dr_grpo")  # grpo: (r - mean) / (std + eps); dr_grpo: r - mean
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
    if not names.ENGINE_TRAITS[rollout.engine].agentic:
        raise ValueError(
            f'[rollout] engine: "{rollout.engine}" cannot sample the trained policy\'s turns of '
            f"agentic episodes in this process; use {names.engines_that('agentic')}"
        )
    if rollout.engine == "vllm" and rollout.vllm.mode == "server":
        raise ValueError(
            '[rollout.vllm] mode = "server": agentic episodes play their turns on an engine in '
            'this process; set mode = "colocate"'
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


def _check_task_and_roles(section: AgenticSection, data: dict[str, Any]) -> None:
    name = names.format_name(data.get("data"))
    if name is not None and name not in names.AGENTIC_FORMATS:
        raise ValueError(
            f"[data] task: agentic episodes need problems with a code view; '{name}' has none "
            "(use arithmetic, or code problems from [data] path)"
        )
    models = data.get("models")
    if models is None:
        return
    named = {role for role, (model, _) in named_roles(models).items() if model}
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
