"""The API roles a config names, and the rule LLM and classic runs share about them: an
enabled log assistant's role has a model."""

from __future__ import annotations

from ascent.config.api import MODEL_SUFFIX, AssistantSection, ModelsSection, RoleSection


def named_roles(models: ModelsSection) -> dict[str, tuple[str | None, RoleSection]]:
    """Every role `[models]` names -> (model or None when only a table names it, its
    overrides)."""
    found: dict[str, tuple[str | None, RoleSection]] = {}
    values = {
        **{k: getattr(models, k) for k in type(models).model_fields},
        **(models.model_extra or {}),
    }
    for key, value in values.items():
        if key == "fallback_model" or value is None:
            continue
        if isinstance(value, RoleSection):
            model, table = found.get(key, (None, None))
            found[key] = (model or value.model, value)
        elif key.endswith(MODEL_SUFFIX):
            role = key[: -len(MODEL_SUFFIX)]
            _, table = found.get(role, (None, None))
            found[role] = (value, table or RoleSection())
    return dict(sorted(found.items()))


def check_assistant_role(assistant: AssistantSection, models: ModelsSection) -> None:
    """Refuse, at load time, an enabled assistant whose role has no model (LLM and classic
    runs alike)."""
    if assistant.enabled and not named_roles(models).get(assistant.role, (None,))[0]:
        raise ValueError(
            f"[assistant] role: {assistant.role!r} has no model; add {assistant.role}_model = "
            '"name" to [models] or set [assistant] enabled = false'
        )
