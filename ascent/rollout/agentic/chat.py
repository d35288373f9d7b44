"""The policy's thread as a chat, for policies whose tokenizer has a chat template.

The role's instructions are the system message, the problem and the transcript so far the
first user message; each later turn adds the policy's answer as an assistant message and
what happened since as a new user message. The tokens between two policy turns (mask 0 in
the row) are exactly what the template writes between the end of the assistant's answer and
the opening of the next assistant turn, so the policy reads what a chat model expects and the
row still holds the very tokens it was conditioned on.
"""

from __future__ import annotations

from typing import Any

from transformers.tokenization_utils_base import PreTrainedTokenizerBase

Message = dict[str, Any]


class ChatTemplate:
    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer

    def _render(self, messages: list[Message], opening: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=opening
        )

    def start(self, messages: list[Message]) -> str:
        """The first context: the messages and the opening of the assistant's turn."""
        return self._render(messages, True)

    def continuation(
        self, messages: list[Message], answer: str, user: Message, sampled_end: str
    ) -> str:
        """The text after the policy's `answer` up to the opening of its next turn, with
        `user` said in between; `sampled_end` is the end-of-turn token the policy sampled
        itself ('' when max_new_tokens cut it), which the thread already holds."""
        done = [*messages, {"role": "assistant", "content": answer}]
        before = self._render(done, False)
        after = self._render([*done, user], True)
        if not after.startswith(before):
            raise ValueError(
                "the chat template rewrites earlier turns, so a thread cannot grow turn by "
                'turn; set [data] chat_template = "off"'
            )
        end = before.rfind(answer) + len(answer) if answer and answer in before else len(before)
        text = after[end:]
        return text[len(sampled_end) :] if sampled_end and text.startswith(sampled_end) else text
