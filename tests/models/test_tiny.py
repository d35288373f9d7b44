"""The built-in tiny model and its tokenizer behave like a downloaded Hugging Face model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ascent.config.llm_sections import ModelSection
from ascent.errors import AscentError, UnknownNameError
from ascent.models import (
    TINY,
    build_char_tokenizer,
    build_tiny_model,
    load_policy,
    load_reference,
    load_tokenizer,
    resolve_model_path,
)
from ascent.models.tokenizer import ALPHABET


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCENT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize(
    "text", ["07+45=52", "use 3 7 8 25 to make 31:\n(25+8)-3+1", ALPHABET, " lead and trail "]
)
def test_tokenizer_round_trip_is_exact_and_one_token_per_character(text):
    tok = build_char_tokenizer()
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)
    assert tok.decode(ids) == text


def test_tokenizer_special_tokens_and_unknown_characters():
    tok = build_char_tokenizer()
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert tok("A")["input_ids"] == [tok.unk_token_id]
    assert tok.decode([*tok("12")["input_ids"], tok.eos_token_id], skip_special_tokens=True) == "12"


def test_tiny_model_size_is_in_the_promised_range_and_init_is_seeded():
    model, _ = build_tiny_model()
    again, _ = build_tiny_model()
    n = sum(p.numel() for p in model.parameters())
    assert 1_000_000 <= n <= 5_000_000
    for a, b in zip(model.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)


def test_builtin_name_resolves_to_a_save_pretrained_directory_loaded_by_auto_classes(cache):
    path = resolve_model_path(TINY)
    assert str(cache) in path
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    built, _ = build_tiny_model()
    for (name, a), b in zip(model.state_dict().items(), built.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert tok.decode(tok("12+34=46")["input_ids"]) == "12+34=46"


def test_hub_loading_path_on_a_local_directory(tmp_path):
    model, tok = build_tiny_model(seed=7)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    cfg = ModelSection(name_or_path=str(tmp_path / "m"))
    policy = load_policy(cfg, torch.device("cpu"))
    ref = load_reference(cfg, torch.device("cpu"))
    loaded_tok = load_tokenizer(cfg)
    assert policy.training and not ref.training
    assert all(p.requires_grad for p in policy.parameters())
    assert not any(p.requires_grad for p in ref.parameters())
    assert torch.equal(policy.lm_head.weight, model.lm_head.weight)
    assert loaded_tok.padding_side == "left" and loaded_tok.pad_token_id == 0


def test_unknown_builtin_and_missing_directory_are_clear_errors(tmp_path):
    with pytest.raises(UnknownNameError, match="did you mean 'ascent:tiny'"):
        resolve_model_path("ascent:tiny2")
    with pytest.raises(AscentError, match="no such local directory"):
        load_policy(ModelSection(name_or_path=str(tmp_path / "nope")), torch.device("cpu"))
