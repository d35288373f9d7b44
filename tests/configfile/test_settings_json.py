"""A key pasted into the wrong field of a classic run's settings.json is never printed: the
one-line error, the warning or the note that names the field shows its first 4 characters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fake_secrets import FAKE_KEY

KEY = FAKE_KEY


def leaked(text: str, secret: str = KEY) -> list[str]:
    """Every 5-character piece of `secret` past its first 4 characters found in `text`."""
    return [secret[i : i + 5] for i in range(4, len(secret) - 4) if secret[i : i + 5] in text]


def classic_beside(tmp_path: Path, settings: dict[str, Any]) -> Path:
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    config = tmp_path / "ppo.toml"
    config.write_text('[env]\nid = "CartPole-v1"\n')
    return config


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"runtime": {"num_workers": KEY}}, "runtime.num_workers 'sk-Z…' (32 chars): "),
        ({"service": {"endpoints": KEY}}, "service.endpoints 'sk-Z…' (32 chars): expected"),
        ({"service": {"endpoints": {"chat": KEY}}}, "service.endpoints.chat 'sk-Z…' (32 chars)"),
        ({"service": {"base_url": KEY}}, "service.base_url -> [api] base_url: 'sk-Z…' (32 chars)"),
        ({"runtime": {"device": KEY}}, "runtime.device -> [run] device: "),
        ({"device": KEY}, "device -> [run] device: "),  # flat: checked before the loader quotes it
        ({KEY: 1}, "unknown key 'sk-Z…' (32 chars)"),
        ({"service": {KEY: 1}}, "unknown key service.'sk-Z…' (32 chars)"),
    ],
)
def test_a_refused_field_holding_a_key_is_named_without_it(tmp_path, run_cli, settings, says):
    code, out, err = run_cli("config", "show", str(classic_beside(tmp_path, settings)))
    assert code == 2 and err.count("\n") == 1
    assert says in err
    assert leaked(out + err) == []


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"paths": {"config": KEY}}, "paths.config 'sk-Z…' (32 chars) is not the config"),
        ({"version": KEY}, "version = 'sk-Z…' (32 chars) from "),
        ({"project": KEY}, "logging.project = 'sk-Z…' (32 chars) from "),
        ({"output_dir": KEY}, "run.output_dir = 'sk-Z…' (32 chars) from "),
    ],
)
def test_a_field_ascent_accepts_is_noted_without_the_key_it_holds(
    tmp_path, run_cli, settings, says
):
    code, out, err = run_cli("config", "show", str(classic_beside(tmp_path, settings)))
    assert code == 0, err
    # the notes and warnings (comments); the config itself shows the values in effect
    said = "\n".join(line for line in (out + err).splitlines() if line.startswith("#"))
    assert says in said
    assert leaked(said) == []
