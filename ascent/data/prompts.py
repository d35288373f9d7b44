"""What the policy reads: the problem in `[data] prompt_template`, optionally in the
tokenizer's chat template, as token ids.

With a chat template (`[data] chat_template`, auto: when the tokenizer has one), the rendered
prompt is the single user message and the template adds the assistant turn's opening, as TRL
does for conversational data; its text already holds the special tokens the model expects,
so it is encoded without adding more.
"""

from __future__ import annotations

from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.data.problems import Problem, render_prompt
from ascent.errors import ConfigError


def uses_chat_template(mode: str, tokenizer: PreTrainedTokenizerBase) -> bool:
    """Resolve `[data] chat_template` (auto / on / off) against the tokenizer."""
    has_one = bool(getattr(tokenizer, "chat_template", None))
    if mode == "on" and not has_one:
        raise ConfigError(
            '[data] chat_template: "on", but the tokenizer has no chat template; set it to '
            '"auto" or "off", or use a tokenizer with one ([model] tokenizer)'
        )
    return has_one and mode != "off"


class PromptFormatter:
    """Problems -> prompt text and token ids, the same way for training and evaluation."""

    def __init__(self, template: str, tokenizer: PreTrainedTokenizerBase, chat: bool) -> None:
        self.template = template
        self.tokenizer = tokenizer
        self.chat = chat

    def rendered(self, problem: Problem) -> str:
        """The template filled in (what reward functions receive as the prompt)."""
        return render_prompt(self.template, problem)

    def text(self, problem: Problem) -> str:
        """The exact text the policy continues (chat-wrapped when `chat`)."""
        message = self.rendered(problem)
        if not self.chat:
            return message
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
        )

    def encode(self, problems: list[Problem]) -> list[list[int]]:
        texts = [self.text(p) for p in problems]
        return self.tokenizer(texts, add_special_tokens=not self.chat)["input_ids"]
