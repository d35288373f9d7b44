"""Config sections for rewards and the code sandbox: `[reward]` and `[sandbox]`."""

from __future__ import annotations

from ascent.config.base import Section


class RewardSection(Section):
    """`[reward]`: which reward functions score completions, and their settings."""


class SandboxSection(Section):
    """`[sandbox]`: isolation and limits for running model-written programs."""
