"""Numbers in a config are finite numbers: inf, NaN and booleans are refused at load, with the
key named, before a run can train NaN weights and save them as its best model."""

from __future__ import annotations

import math

import pytest

from ascent.config.base import Section, _numeric
from ascent.configfile import load_config
from ascent.errors import ConfigError
from ascent.rules import LLMConfig


def float_keys(model: type[Section], prefix: str = "") -> list[str]:
    """Every float key of every section of `model`, dotted (nested sections included)."""
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, Section):
            keys += float_keys(ann, f"{prefix}{name}.")
        elif _numeric(ann) and float in (ann, *getattr(ann, "__args__", ())):
            keys.append(f"{prefix}{name}")
    return keys


KEYS = float_keys(LLMConfig)


def test_there_are_float_keys_to_check():
    assert {"optim.lr", "algorithm.kl_coef", "rollout.temperature"} <= set(KEYS)
    assert len(KEYS) > 40


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
def test_every_float_key_refuses_a_non_finite_value(value):
    for key in KEYS:
        section, _, name = key.rpartition(".")
        with pytest.raises(ConfigError, match=rf"\[{section}\] {name}: must be a finite number"):
            load_config(None, [f"{key}={value}"])


@pytest.mark.parametrize("key", ["rollout.temperature", "train.batch_size", "optim.lr"])
def test_a_boolean_is_not_a_number(key):
    section, _, name = key.rpartition(".")
    with pytest.raises(ConfigError, match=rf"\[{section}\] {name}: true is not a number"):
        load_config(None, [f"{key}=true"])


@pytest.mark.parametrize("betas", ["[2.0, 0.5]", "[0.9, 1.0]", "[-0.1, 0.9]"])
def test_adam_betas_are_decay_rates(betas):
    with pytest.raises(ConfigError, match=r"\[optim\] betas: Adam's betas are decay rates"):
        load_config(None, [f"optim.betas={betas}"])


def test_ordinary_numbers_still_load():
    cfg = load_config(None, ["optim.betas=[0.0, 0.99]", "rollout.temperature=1", "optim.lr=3e-6"])
    assert cfg.optim.betas == (0.0, 0.99) and cfg.rollout.temperature == 1.0
    assert math.isclose(cfg.optim.lr, 3e-6)
