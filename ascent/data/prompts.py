"""What the policy reads: the problem in `[data] prompt_template`, optionally in the
tokenizer's chat template, as token ids.

With a chat template (`[data] chat_template`, auto: when the tokenizer has one), the rendered
prompt is the single user message and the template adds the assistant turn's opening, as TRL
does for conversational data. The text and its encoding come from `ascent.models.prompting`,
the one rule `ascent serve` and agentic threads follow too, so a served policy reads a
question exactly as it read it in training.
"""

from __future__ import annotations

from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.data.problems import CHAT_CONTEXT, Problem, render_prompt
from ascent.errors import ConfigError

# `ascent.models.prompting` is imported where it is used: the `ascent.models` package loads
# transformers' model classes (2-3 s on a 2-core machine), which `ascent data` commands that
# never format a prompt should not wait for.


def uses_chat_template(mode: str, tokenizer: PreTrainedTokenizerBase) -> bool:
    """Resolve `[data] chat_template` (auto / on / off) against the tokenizer."""
    from ascent.models.prompting import has_chat_template

    has_one = has_chat_template(tokenizer)
    if mode == "on" and not has_one:
        source = getattr(tokenizer, "name_or_path", "") or "the tokenizer"
        raise ConfigError(
            f'[data] chat_template: "on", but {source} has no chat template; set it to '
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
        """The exact text the policy continues (chat-wrapped when `chat`), after the messages
        a conversational source puts before the problem (its `chat_context`: a system prompt,
        few-shot turns), which without a chat template are plain lines before it."""
        from ascent.models.prompting import render_chat

        messages = [*problem.columns.get(CHAT_CONTEXT, ())]
        messages.append({"role": "user", "content": self.rendered(problem)})
        return render_chat(self.tokenizer, messages, template=self.chat)

    def encode(self, problems: list[Problem]) -> list[list[int]]:
        """The token ids the policy continues, one list per problem."""
        from ascent.models.prompting import prompt_ids

        return prompt_ids(self.tokenizer, [self.text(p) for p in problems])
