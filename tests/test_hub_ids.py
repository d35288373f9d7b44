"""Loose model names from the write-ups get the hub id they mean; names it cannot place get
none (a wrong guess is worse than none)."""

from __future__ import annotations

import pytest

from ascent.hub_ids import KNOWN_HUB_IDS, hub_id_hint, is_hub_id


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("qwen-32b", "Qwen/Qwen2.5-32B-Instruct"),
        ("Qwen2.5-32B-Instruct", "Qwen/Qwen2.5-32B-Instruct"),
        ("qwen2.5-math-7b", "Qwen/Qwen2.5-Math-7B-Instruct"),
        ("Qwen2.5-Coder-32B", "Qwen/Qwen2.5-Coder-32B-Instruct"),
        ("deepseek-r1-7b", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"),
        ("smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct"),
        ("qwq-32b", "Qwen/QwQ-32B"),
    ],
)
def test_loose_names_get_the_hub_id_they_mean(name, meant):
    assert hub_id_hint(name) == meant


@pytest.mark.parametrize(
    "name", ["Qwen/Qwen2.5-7B", "gpt2", "claude-sonnet-4-20250514", "my-finetune", "qwen-13b", ""]
)
def test_hub_ids_and_names_it_cannot_place_get_no_hint(name):
    assert hub_id_hint(name) is None


def test_every_listed_id_is_a_hub_id_and_names_itself():
    assert len(set(KNOWN_HUB_IDS)) == len(KNOWN_HUB_IDS)
    for hub_id in KNOWN_HUB_IDS:
        assert is_hub_id(hub_id)
        assert hub_id_hint(hub_id.partition("/")[2]) == hub_id
