"""The policy's thread as a chat, for policies whose tokenizer has a chat template.

The role's instructions are the system message, the problem and the transcript so far the
first user message; each later turn adds the policy's answer as an assistant message and
what happened since as a new user message. The tokens between two policy turns (mask 0 in
the row) are exactly what the template writes between the end of the assistant's answer and
the opening of the next assistant turn, so the policy reads what a chat model expects and the
row still holds the very tokens it was conditioned on.

The policy's own turns stay in the thread as the ids it sampled, never decoded and encoded
again (a sampled split such as `Hel` + `lo` would come back as `Hello`): only the text the
template writes around them is encoded. Rendering and encoding follow
`ascent.models.prompting`, the rule the trainer and `ascent serve` use.
"""

from __future__ import annotations

from typing import Any

from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.models.prompting import render_chat

Message = dict[str, Any]

# An answer no policy writes: where it lands in a rendering shows what the template writes
# after an assistant message's content.
_PROBE = "\x00ascent-answer\x00"


class ChatTemplate:
    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer

    def _render(self, messages: list[Message], opening: bool) -> str:
        return render_chat(self.tokenizer, messages, opening=opening)

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
        text = after[self._answer_end(messages, answer, before) :]
        return text[len(sampled_end) :] if sampled_end and text.startswith(sampled_end) else text

    def _answer_end(self, messages: list[Message], answer: str, before: str) -> int:
        """Where the answer's content ends in `before`: ahead of what the template writes
        after any assistant content (found with a probe answer), so an answer that is empty
        or occurs again in that tail (a newline) is not mistaken for it."""
        probe = self._render([*messages, {"role": "assistant", "content": _PROBE}], False)
        if _PROBE in probe:
            tail = probe[probe.rindex(_PROBE) + len(_PROBE) :]
            if before.endswith(answer + tail):
                return len(before) - len(tail)
        # a template that changes the content (trims it): after its last occurrence
        found = before.rfind(answer) if answer else -1
        return found + len(answer) if found >= 0 else len(before)
