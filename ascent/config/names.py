"""Names of the parts that live in higher layers, as the config may refer to them.

The config is a leaf: it never imports `ascent.data` or `ascent.rollout`, where these parts
are registered. Their names are written here once; `tests/config/test_names.py` checks that
each list equals its registry, so adding a part means adding its name here too.
"""

from __future__ import annotations

from collections.abc import Iterable

from ascent.errors import did_you_mean

TASKS = ("arithmetic", "countdown")  # ascent.data.tasks.TASKS
ENGINES = ("transformers", "vllm")  # ascent.rollout.ENGINES
AGENTIC_FORMATS = ("arithmetic", "code")  # ascent.rollout.agentic.format_registry.FORMATS


def unknown_message(kind: str, name: str, valid: Iterable[str]) -> str:
    """The same wording as `Registry.unknown_message`."""
    names = sorted(valid)
    return f"unknown {kind} '{name}'{did_you_mean(name, names)}; valid: {', '.join(names)}"
