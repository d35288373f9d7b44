"""Supervised warm-up: teach a model the answer format (and some skill) before RL.

RL with verifiable rewards needs a policy that sometimes succeeds: a randomly initialised
model never produces a correct sum, so every group's rewards are equal and every advantage
is 0. A short run of next-token training on `prompt + answer + EOS` (loss on the answer
tokens only) gives the tiny model a foothold. `scripts/make_warm_start.py` uses it to build
the shipped `ascent:tiny-arithmetic` checkpoint.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
from torch import Tensor, nn
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ascent.data import Problem
from ascent.models.prompting import prompt_ids


def answer_batch(
    tokenizer: PreTrainedTokenizerBase, problems: list[Problem]
) -> tuple[Tensor, Tensor, Tensor]:
    """(ids, attention mask, labels) of `prompt + answer + EOS`, right-padded; labels are
    -100 on the prompt and on padding, so only the answer (and EOS) is learned."""
    prompts = prompt_ids(tokenizer, [p.prompt for p in problems])
    answers = tokenizer([p.answer for p in problems], add_special_tokens=False)["input_ids"]
    rows = [(q, [*a, tokenizer.eos_token_id]) for q, a in zip(prompts, answers, strict=True)]
    width = max(len(q) + len(a) for q, a in rows)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (q, a) in enumerate(rows):
        ids[i, : len(q) + len(a)] = torch.tensor(q + a)
        labels[i, len(q) : len(q) + len(a)] = torch.tensor(a)
        mask[i, : len(q) + len(a)] = 1
    return ids, mask, labels


def supervised_warmup(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[Problem],
    *,
    steps: int,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    on_step: Callable[[int, float], bool] | None = None,
) -> int:
    """Train on answers for up to `steps` steps; `on_step(step, loss)` returning True stops.

    Returns the number of steps taken.
    """
    rng = random.Random(seed)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for step in range(1, steps + 1):
        ids, mask, labels = (
            t.to(device) for t in answer_batch(tokenizer, rng.sample(problems, batch_size))
        )
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if on_step is not None and on_step(step, float(loss)):
            return step
    return steps
