"""A multi-turn agentic thread in SmolLM2's real chat template: the policy's sampled ids stay
in the thread as it sampled them (never decoded and re-encoded), and what lies between its
turns is exactly what the template writes there, also after an empty answer and after a turn
cut by max_new_tokens."""

from __future__ import annotations

import asyncio

from ascent.rollout.agentic.chat import ChatTemplate
from ascent.rollout.agentic.roles import Generated
from tests.agentic.conftest import double_problem, fenced, runner

ECHO = "print(int(input()))\n"  # fails the sample test
RIGHT = "print(2 * int(input()))\n"


class CharByCharPolicy:
    """Samples each answer one character per token: ids a BPE tokenizer would never produce
    from the decoded text (`print` comes back as one token), so any re-encoding shows."""

    def __init__(self, tokenizer, answers: list[tuple[str, bool]]) -> None:
        self.tokenizer = tokenizer
        self.answers = list(answers)  # (text, ended with EOS)
        self.contexts: list[list[int]] = []
        self.sampled: list[list[int]] = []

    async def generate(self, context: list[int]) -> Generated:
        self.contexts.append(list(context))
        text, ended = self.answers.pop(0)
        ids = [i for ch in text for i in self.tokenizer(ch, add_special_tokens=False)["input_ids"]]
        ids += [self.tokenizer.eos_token_id] if ended else []
        self.sampled.append(ids)
        decoded = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Generated(ids, [-0.5] * len(ids), ended, decoded, 1)


def test_sampled_ids_stay_byte_identical_and_the_template_fills_the_gaps(pool, smollm2_tokenizer):
    tok = smollm2_tokenizer
    answers = [(fenced(ECHO), True), ("", True), (fenced(ECHO), False), (fenced(RIGHT), True)]
    policy = CharByCharPolicy(tok, answers)
    run = runner(pool, tok, policy, chat=ChatTemplate(tok), max_turns=4)
    episode = asyncio.run(run.run(double_problem(), 4))
    assert episode.stop == "accepted" and len(policy.contexts) == 4
    assert tok(fenced(ECHO), add_special_tokens=False)["input_ids"] != policy.sampled[0][:-1]

    # Each turn's context begins with the previous context and the ids sampled after it.
    pairs = zip(policy.contexts[:-1], policy.sampled[:-1], policy.contexts[1:], strict=True)
    for before, sampled, after in pairs:
        assert after[: len(before) + len(sampled)] == before + sampled

    # And reads, as text, exactly what the template renders for the chat so far.
    (thread,) = episode.threads
    messages = thread.messages  # system, user, then (assistant, user) per later turn
    assert [m["role"] for m in messages] == ["system", "user"] + ["assistant", "user"] * 3
    for turn, context in enumerate(policy.contexts):
        chat = messages[: 2 + 2 * turn]
        expected = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        assert tok.decode(context) == expected, f"turn {turn}"
    # the row trains on exactly the sampled ids
    assert thread.prompt + thread.response == policy.contexts[-1] + policy.sampled[-1]
    taken = [t for t, m in zip(thread.response, thread.mask, strict=True) if m == 1]
    assert taken == [i for ids in policy.sampled for i in ids]
