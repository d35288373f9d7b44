"""`ascent.names` (which the config reads) names the parts of higher layers without importing
them; the lists must match the registries, or a valid name would be refused (or an unknown
one let through)."""

from __future__ import annotations

from dataclasses import replace

from ascent import names


def test_task_names_match_the_data_registry():
    from ascent.data.tasks import TASKS

    assert sorted(names.TASKS) == TASKS.names()


def test_engine_names_and_traits_match_what_each_engine_registered():
    from ascent.rollout import ENGINES

    assert sorted(names.ENGINES) == ENGINES.names()
    for name in ENGINES.names():
        assert ENGINES.meta(name)["traits"] == names.ENGINE_TRAITS[name], name


def test_the_rules_read_the_engine_traits_not_engine_names(monkeypatch):
    """An engine that registers as able to play agentic turns is accepted for them, one that
    cannot is refused naming those that can: the refusal follows the traits."""
    import pytest

    from ascent.configfile import load_config
    from ascent.errors import ConfigError

    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())  # vllm "installed"
    roles = '{hypothesis="off", solver="policy", testgen="off", summarizer="off"}'
    agentic = ['rollout.engine="vllm"', "agentic.enabled=true", f"agentic.roles={roles}"]
    vllm = names.ENGINE_TRAITS["vllm"]
    monkeypatch.setitem(names.ENGINE_TRAITS, "vllm", replace(vllm, agentic=False))
    with pytest.raises(ConfigError, match=r'"vllm" cannot sample .* use "transformers"'):
        load_config(None, agentic)
    monkeypatch.setitem(names.ENGINE_TRAITS, "vllm", replace(vllm, agentic=True))
    assert load_config(None, agentic).rollout.engine == "vllm"


def test_agentic_format_names_match_the_format_registry():
    from ascent.rollout.agentic.format_registry import FORMATS

    assert sorted(names.AGENTIC_FORMATS) == FORMATS.names()


def test_an_unknown_task_is_refused_at_load_with_the_valid_names():
    import pytest

    from ascent.configfile import load_config
    from ascent.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown task 'countdwn' \\(did you mean 'countdown'"):
        load_config(None, ['data.task="countdwn"'])
