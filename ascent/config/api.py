"""Config sections for the OpenAI-compatible API channel: `[api]`, `[models]`, `[assistant]`."""

from __future__ import annotations

from ascent.config.base import Section


class ApiSection(Section):
    """`[api]`: the default OpenAI-compatible endpoint for API-served roles."""


class ModelsSection(Section):
    """`[models]`: which model plays each role (`<role>_model = "name"`)."""


class AssistantSection(Section):
    """`[assistant]`: the optional log-analysis assistant."""
