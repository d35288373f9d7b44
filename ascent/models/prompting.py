"""Messages -> the exact text the policy continues -> its token ids: one rule for the trainer's
rollouts, its evaluation, agentic threads and `ascent serve`.

A policy answers the prompt it was trained on only if every caller builds that prompt the
same way, to the token. Two things drift easily when each caller does it itself:

- the text: with a chat template, the messages rendered with the opening of the assistant's
  turn (and whatever the template adds, e.g. SmolLM2's default system message); without
  one, the messages' contents, which for one user message is the rendered prompt itself;
- the encoding: a chat template already wrote every special token the model expects (a BOS,
  `<|im_start|>`), so its text is encoded without adding any (as `apply_chat_template(...,
  tokenize=True)` and vLLM's chat endpoint do); a plain prompt gets the tokenizer's own special
  tokens (a Llama BOS), unless it already starts with the BOS.

The rendered text is a `ChatText` (a `str`), so the rule travels with it through callers that
only pass strings along (the server's request batcher) and `prompt_ids` still knows how it
was made. Text appended after a sequence's start (an agentic observation) is a continuation:
`continuation_ids` never adds special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers.tokenization_utils_base import PreTrainedTokenizerBase

Message = dict[str, Any]


class ChatText(str):
    """Text rendered by a tokenizer's chat template: it holds every special token the model
    expects, so it is encoded with none added. Any string operation returns a plain `str`."""

    __slots__ = ()


def has_chat_template(tokenizer: Any) -> bool:
    return bool(getattr(tokenizer, "chat_template", None))


def render_chat(
    tokenizer: PreTrainedTokenizerBase,
    messages: Sequence[Message],
    *,
    template: bool = True,
    opening: bool = True,
) -> str:
    """The text the policy continues after `messages`.

    `template`: render with the tokenizer's chat template (the caller resolved whether to use
    it: `[data] chat_template` for training, the tokenizer having one for serving); `opening`:
    end with the assistant turn's opening (the generation prompt). Without a template the
    contents are joined by newlines, so one user message is its content unchanged: the plain
    prompt the trainer uses."""
    if not template:
        return "\n".join(str(m.get("content") or "") for m in messages)
    text = tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=opening
    )
    return ChatText(text)


def prompt_ids(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of prompts (the start of a sequence): a `ChatText` as it is, a plain text
    with the tokenizer's special tokens unless it already begins with the BOS token (so no
    prompt ever holds two). Batched: one tokenizer call per kind."""
    bos = getattr(tokenizer, "bos_token", None)
    add = [not isinstance(t, ChatText) and not (bos and t.startswith(bos)) for t in texts]
    out: list[list[int]] = [[] for _ in texts]
    for flag in (False, True):
        rows = [i for i, a in enumerate(add) if a is flag]
        if rows:
            ids = tokenizer([texts[i] for i in rows], add_special_tokens=flag)["input_ids"]
            for i, row in zip(rows, ids, strict=True):
                out[i] = list(row)
    return out


def continuation_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of text appended to a sequence already begun: no special token is added
    (those it needs are in the text, as the template wrote them)."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []
