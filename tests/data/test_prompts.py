"""Prompt formatting: the template, then the tokenizer's chat template when it has one."""

from __future__ import annotations

import pytest

from ascent.data import Problem, PromptFormatter, uses_chat_template
from ascent.errors import ConfigError
from ascent.models import build_char_tokenizer

CHAT = (
    "{% for m in messages %}<{{ m['content'] }}>{% endfor %}"
    "{% if add_generation_prompt %}:{% endif %}"
)
PROBLEM = Problem(key="k", prompt="1+2=", answer="3", columns={"level": 2})


def test_chat_template_wraps_the_rendered_prompt_as_one_user_message():
    tokenizer = build_char_tokenizer()
    tokenizer.chat_template = CHAT
    assert uses_chat_template("auto", tokenizer)
    formatter = PromptFormatter("q{level} {prompt}", tokenizer, chat=True)
    assert formatter.rendered(PROBLEM) == "q2 1+2="
    assert formatter.text(PROBLEM) == "<q2 1+2=>:"
    (ids,) = formatter.encode([PROBLEM])
    assert tokenizer.decode(ids) == "<q2 1+2=>:"  # nothing added around the template's text


def test_without_a_chat_template_auto_is_plain_and_on_is_refused():
    tokenizer = build_char_tokenizer()
    assert not uses_chat_template("auto", tokenizer)
    with pytest.raises(ConfigError, match="the tokenizer has no chat template"):
        uses_chat_template("on", tokenizer)
    tokenizer.chat_template = CHAT
    assert not uses_chat_template("off", tokenizer)
    assert PromptFormatter("{prompt}", tokenizer, chat=False).text(PROBLEM) == "1+2="
