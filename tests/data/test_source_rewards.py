"""Sources that score themselves and the rewards that ask them come together: a generator's or
environment's problems without its reward, or the reward without such problems, is refused
when the config loads, in one line saying what to add or remove; so are settings for them
that cannot travel as JSON."""

from __future__ import annotations

import re

import pytest

from ascent.configfile import load_config
from ascent.errors import ConfigError

RUN = """
[model]
name_or_path = "ascent:tiny"
[data]
{data}
[reward]
{reward}
"""
SOURCES = {
    "reasoning_gym": "reasoning_gym:chain_sum",
    "openenv": "openenv:ascent.envs.openenv_addition:app",
    "verifiers": "verifiers:ascent.envs.verifiers_addition",
}


@pytest.mark.parametrize(
    ("data", "reward_keys", "message"),
    [
        *[(f'path = "{path}"', 'functions = ["math"]', f'add "{reward}" to functions')
          for reward, path in SOURCES.items()],
        *[('task = "arithmetic"', f'functions = ["{reward}"]', "this run has none")
          for reward in SOURCES],
        ('task = "arithmetic"', 'functions = ["math"]\nreasoning_gym = {answer_format = "text"}',
         "only the reasoning_gym reward reads it"),
    ],
)  # fmt: skip
def test_a_scoring_source_and_its_reward_come_together(tmp_path, data, reward_keys, message):
    path = tmp_path / "run.toml"
    path.write_text(RUN.format(data=data, reward=reward_keys))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (f'path = "{SOURCES["verifiers"]}"\nverifiers = {{digits = 1979-05-27}}',
         "[data] verifiers"),
        (f'path = "{SOURCES["reasoning_gym"]}"\nreasoning_gym = {{min_terms = 07:32:00}}',
         "[data] reasoning_gym"),
        (f'path = "{SOURCES["openenv"]}"\n[data.openenv]\nreset = {{day = 1979-05-27}}',
         "[data.openenv] reset"),
    ],
)  # fmt: skip
def test_settings_that_cannot_travel_as_json_are_refused_at_load(tmp_path, data, where):
    path = tmp_path / "run.toml"
    reward = data.split('"')[1].split(":")[0]
    path.write_text(RUN.format(data=data, reward=f'functions = ["{reward}"]'))
    with pytest.raises(ConfigError, match=rf"{re.escape(where)}: settings must be strings"):
        load_config(path)
