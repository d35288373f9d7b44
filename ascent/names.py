"""Names (and, for engines, what each can do) of the parts that live in higher layers, as the
config and its rules may refer to them.

The config is a leaf: it never imports `ascent.data` or `ascent.rollout`, where these parts
are registered. Their names are written here once; `tests/test_names.py` checks that
each list equals its registry (`tests/data/test_clean.py` the drop reasons), and that each
engine's traits equal the ones it registered with, so adding a part means adding it here too,
and the rules that refuse what an engine cannot do read its registered traits instead of
restating them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ascent.errors import did_you_mean


@dataclass(frozen=True)
class EngineTraits:
    """What a rollout engine can do, declared where it registers (`ENGINES.register(name,
    traits=...)`): what the rules need to know before anything is loaded."""

    module: str | None = None  # the package it needs (checked with find_spec) ...
    extra: str | None = None  # ... and the scripts/setup.sh extra that installs it
    agentic: bool = False  # samples the trained policy's turns of agentic episodes in-process
    ray_replicas: bool = False  # Ray rollout replicas run it
    exact_float32: bool = False  # in float32, samples with the trainer's weights and numerics
    partial: bool = False  # takes newly published weights between two decode steps


TASKS = ("arithmetic", "countdown")  # ascent.data.tasks.TASKS
ENGINE_TRAITS = {  # ascent.rollout.ENGINES and their `traits`
    "transformers": EngineTraits(agentic=True, ray_replicas=True, exact_float32=True, partial=True),
    "vllm": EngineTraits(module="vllm", extra="vllm", agentic=True),
}
ENGINES = tuple(ENGINE_TRAITS)


def engines_that(trait: str) -> str:
    """The engines with `trait`, for a message: 'transformers' or 'transformers or vllm'."""
    return " or ".join(f'"{n}"' for n, t in ENGINE_TRAITS.items() if getattr(t, trait))


AGENTIC_FORMATS = ("arithmetic", "code")  # ascent.rollout.agentic.format_registry.FORMATS
# The drop reasons of `ascent data clean` (ascent.data.clean.FILTERS) decided by matching the
# problem's text, which [clean] extra_patterns can extend.
PATTERN_REASONS = (
    "needs_figure",
    "needs_table",
    "proof",
    "multi_question",
    "file_io",
    "network",
    "environment",
)
# Every drop reason, in the order the filters are tried (a row gets the first that applies).
DROP_REASONS = ("empty", *PATTERN_REASONS, "bad_answer", "reference_fails")


def format_name(data: Any) -> str | None:
    """The episode format of a `[data]` section: code for data files, else the task's name."""
    if data is None:
        return None
    return "code" if getattr(data, "path", None) is not None else data.task


def unknown_message(kind: str, name: str, valid: Iterable[str]) -> str:
    """The same wording as `Registry.unknown_message`."""
    names = sorted(valid)
    return f"unknown {kind} '{name}'{did_you_mean(name, names)}; valid: {', '.join(names)}"
