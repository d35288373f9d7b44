"""The config layer names the parts of higher layers without importing them; the lists must
match the registries, or a valid name would be refused (or an unknown one let through)."""

from __future__ import annotations

from ascent.config import names


def test_task_names_match_the_data_registry():
    from ascent.data.tasks import TASKS

    assert sorted(names.TASKS) == TASKS.names()


def test_engine_names_match_the_rollout_registry():
    from ascent.rollout import ENGINES

    assert sorted(names.ENGINES) == ENGINES.names()


def test_agentic_format_names_match_the_format_registry():
    from ascent.rollout.agentic.format_registry import FORMATS

    assert sorted(names.AGENTIC_FORMATS) == FORMATS.names()


def test_an_unknown_task_is_refused_at_load_with_the_valid_names():
    import pytest

    from ascent.configfile import load_config
    from ascent.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown task 'countdwn' \\(did you mean 'countdown'"):
        load_config(None, ['data.task="countdwn"'])
