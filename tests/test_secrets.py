"""One key detector, one redaction: ascent.secrets, on made-up keys and on every key of the
write-ups' configs (none of which is a secret: their keys live in variables)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomllib
import yaml

from ascent.secrets import key_shaped, looks_like_key, mask_secret, redact, secret_name, shown
from tests.fake_secrets import FAKE_KEY

SEEDS = Path(__file__).parent / "configfile" / "seed_configs"


def leaked(text: str, secret: str) -> list[str]:
    """Every 5-character piece of `secret` past its first 4 characters found in `text`."""
    return [secret[i : i + 5] for i in range(4, len(secret) - 4) if secret[i : i + 5] in text]


@pytest.mark.parametrize(
    "token",
    [FAKE_KEY, "gsk_" + FAKE_KEY[4:], "hf_" + FAKE_KEY[4:], "AIza" + FAKE_KEY[4:]],
)
def test_provider_keys_are_key_shaped(token):
    assert key_shaped(token)


@pytest.mark.parametrize(
    "token",
    ["Qwen/Qwen2.5-32B-Instruct", "claude-sonnet-4-20250514", "deepseek-r1-distill-qwen-32b",
     "TAOTOKEN_API_KEY", "https://example.invalid/api/v1", "token_mean", "0.95"],
)  # fmt: skip
def test_model_names_variables_and_settings_are_not(token):
    assert not key_shaped(token)


def test_a_variable_name_is_not_a_key_where_a_name_belongs_but_a_pasted_key_is():
    assert not looks_like_key("OPENAI_API_KEY")
    assert not looks_like_key("OPENAI_API_KEY_2024_BACKUP_STORE")  # upper case: a name
    assert looks_like_key(FAKE_KEY) and looks_like_key("SK-" + FAKE_KEY[3:])
    assert looks_like_key("a8Fk2mQ9xLp3Rt7vWz1Yb4Nc6Hd0Js5G")  # long, mixed case, digits


def test_redact_masks_key_shaped_words_and_pieces_of_known_secrets_to_four_characters():
    held = "n0tKeyShapedButSecret"  # a secret the process holds, not shaped like a key
    text = (
        f"401 from https://x.invalid: key {FAKE_KEY} refused; your header was 'Bearer {held[:12]}'"
    )
    out = redact(text, [held])
    assert leaked(out, FAKE_KEY) == [] and leaked(out, held) == []
    assert mask_secret(FAKE_KEY) in out
    assert "401 from https://x.invalid: key" in out  # the rest is left as it was
    assert redact("nothing to hide here") == "nothing to hide here"


@pytest.mark.parametrize(
    "name", ["api_key", "hub_token", "password", "openai_apikey", "db-password", "auth"]
)
def test_names_whose_value_is_a_secret(name):
    assert secret_name(name)
    assert shown("plain words", name=name) == mask_secret("plain words")


@pytest.mark.parametrize(
    "name",
    ["api_key_env", "token_level_loss", "max_tokens", "key_file", "tokenizer", "keys_seen"],
)
def test_names_that_only_mention_a_secret_word_are_not_secrets(name):
    assert not secret_name(name)


def _keys(table: object, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, value) of every leaf of a parsed config."""
    if isinstance(table, dict):
        return [kv for k, v in table.items() for kv in _keys(v, f"{prefix}{k}.")]
    return [(prefix.rstrip("."), table)]


def _load(path: Path) -> dict:
    if path.suffix == ".toml":
        return tomllib.loads(path.read_text(encoding="utf-8"))
    if path.suffix == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    return yaml.safe_load(path.read_text(encoding="utf-8"))


SEED_FILES = sorted(p for p in SEEDS.iterdir() if p.suffix in {".toml", ".yaml", ".json"})


@pytest.mark.parametrize("path", SEED_FILES, ids=lambda p: p.name)
def test_no_key_of_a_write_up_config_is_taken_for_a_secret(path):
    keys = _keys(_load(path))
    assert len(keys) > 5
    taken = [
        k
        for k, v in keys
        if secret_name(k.rpartition(".")[2]) or (isinstance(v, str) and key_shaped(v))
    ]
    assert taken == []  # token_level_loss, max_tokens, api_key_env, model names: all settings
