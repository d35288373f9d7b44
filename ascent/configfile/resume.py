"""What changed between the config a run was started with and the one `--resume` gives it.

A checkpoint is the state of one config: its model's weights (with or without LoRA
adapters, with or without a critic), its optimiser's moments, its place in one ordering of
one data set, its random streams. A resume under a config that changes what that state
*is* cannot continue the same run, so `RunDir.check` refuses it, naming each such setting;
a change that only steers what comes next (a learning rate, more steps, another group size)
goes on, and is named in a note and in the run's record of its segments' configs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tomllib

from ascent.algos import ADVANTAGES
from ascent.configfile.loader import AnyConfig, dump_config

# Keys whose value does not matter to a resume: the run directory is given by --resume.
WHERE = ("run.name", "run.output_dir")

_WEIGHTS = "the checkpoint holds the old model's weights"
_DATA = "the checkpoint's place in the prompt order belongs to the old training data"

# Settings that define what a checkpoint holds, as (key or section prefix, why), by kind.
LLM_FIXED: tuple[tuple[str, str], ...] = (
    ("model.name_or_path", _WEIGHTS),
    ("model.lora.enabled", "the checkpoint holds the policy with (or without) LoRA adapters"),
    ("model.lora.r", "the checkpoint's LoRA adapters have the old rank"),
    ("model.lora.target_modules", "the checkpoint's LoRA adapters sit on the old modules"),
    ("critic.architecture", "the checkpoint holds the critic of the old architecture"),
    ("critic.name_or_path", "the checkpoint holds the old critic's weights"),
    ("run.seed", "a resumed run continues the random streams its checkpoint holds"),
    ("data.sources", _DATA),
    ("data.task", _DATA),
    ("data.path", _DATA),
    ("data.format", _DATA),
    ("data.split", _DATA),
    ("data.train_size", _DATA),
    ("data.shuffle", _DATA),
    ("data.seed", _DATA),
    ("data.difficulty", _DATA),
    ("data.arithmetic", _DATA),
    ("data.countdown", _DATA),
    ("data.reasoning_gym", _DATA),
    ("data.openenv.prompt_field", _DATA),
    ("data.openenv.reset", _DATA),
    ("data.openenv.action_field", "the checkpoint's replayed rows send the completion there"),
    ("data.verifiers", _DATA),
    ("data.eval_path", "the accuracy before RL was measured on the old held-out set"),
    ("data.eval_split", "the accuracy before RL was measured on the old held-out set"),
    ("data.eval_size", "the accuracy before RL was measured on the old held-out set"),
)
CLASSIC_FIXED: tuple[tuple[str, str], ...] = (
    ("env.id", "the checkpoint's networks and episodes belong to the old environment"),
    ("env.kwargs", "the checkpoint's episodes belong to the old environment"),
    ("env.num_envs", "the checkpoint holds one saved episode per old environment"),
    ("model", "the checkpoint holds networks of the old shape"),
    ("run.seed", "a resumed run continues the random streams its checkpoint holds"),
)


@dataclass(frozen=True)
class Change:
    key: str
    old: Any
    new: Any
    refusal: str | None = None  # why a checkpoint cannot continue under the new value

    def __str__(self) -> str:
        return f"{self.key} {_show(self.old)} -> {_show(self.new)}"


def config_changes(old: AnyConfig, new: AnyConfig) -> list[Change]:
    """Every setting whose resolved value differs, the ones a checkpoint cannot follow marked."""
    before, after = _flat(old), _flat(new)
    if ("env.id" in before) != ("env.id" in after):
        return [Change("kind", _kind(before), _kind(after), "a checkpoint is of one kind")]
    fixed = CLASSIC_FIXED if "env.id" in after else LLM_FIXED
    changes = []
    for key in sorted(before.keys() | after.keys()):
        if key.startswith(WHERE) or before.get(key) == after.get(key):
            continue
        why = next((why for prefix, why in fixed if _under(key, prefix)), None)
        changes.append(Change(key, before.get(key), after.get(key), why))
    return [*_critic_change(before, after), *changes]


def describe(changes: list[Change]) -> str:
    return ", ".join(str(change) for change in changes)


def _critic_change(before: dict[str, Any], after: dict[str, Any]) -> list[Change]:
    """A critic added or dropped: the advantage estimator decides whether there is one."""
    if "algorithm.advantage" not in after:
        return []

    def critic(flat: dict[str, Any]) -> bool:
        return bool(ADVANTAGES.meta(flat["algorithm.advantage"]).get("needs_values"))

    had, has = critic(before), critic(after)
    if had == has:
        return []
    why = "the checkpoint holds a critic" if had else "the checkpoint holds no critic"
    return [Change("critic", "yes" if had else "none", "yes" if has else "none", why)]


def _flat(cfg: AnyConfig) -> dict[str, Any]:
    """The config as written to config.toml, keyed by dotted path (unset keys left out)."""
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        else:
            out[prefix[:-1]] = node

    walk(tomllib.loads(dump_config(cfg)), "")
    return out


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def _kind(flat: dict[str, Any]) -> str:
    return "classic PPO" if "env.id" in flat else "LLM"


def _show(value: Any) -> str:
    return "(unset)" if value is None else repr(value)
