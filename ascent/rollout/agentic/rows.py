"""Episodes -> training rows: one row per policy thread, tool/observation tokens masked out.

A row's prompt is the thread's first context (the role's header); its response is everything
after it, in order: the policy's sampled tokens (mask 1, behaviour log-probs as generated)
and the observation tokens between its turns (mask 0: other roles' outputs, sandbox
feedback, the next cue). `token_turn` says which policy turn each sampled token belongs to,
so a turn's advantage lands on exactly its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ascent.rollout.agentic.transcript import Episode
from ascent.rollout.batch import RolloutBatch
from ascent.rollout.transformers_engine import left_pad


@dataclass(frozen=True)
class PolicyTurnRef:
    episode: int  # index into the batch's episodes
    turn: int  # index into that episode's turns


@dataclass(frozen=True)
class AgenticRows:
    rollout: RolloutBatch
    token_turn: Tensor  # (B, R) long: index into `turns` of each sampled token; -1 elsewhere
    row_episode: list[int]  # (B,) index into `episodes` of each row
    row_version: list[int]  # (B,) oldest policy version of the row's sampled turns
    turns: list[PolicyTurnRef]  # every policy turn that has tokens in some row
    episodes: list[Episode]


def build_rows(episodes: list[Episode], pad_id: int, device: torch.device) -> AgenticRows:
    """Stack every thread of `episodes` that holds a sampled token into one batch."""
    turns: list[PolicyTurnRef] = []
    flat: dict[tuple[int, int], int] = {}
    threads = []
    for e, ep in enumerate(episodes):
        for thread in ep.threads:
            if thread.policy_tokens:
                threads.append((e, thread))
                for t in sorted({t for t in thread.turn_of if t >= 0}):
                    flat[(e, t)] = len(turns)
                    turns.append(PolicyTurnRef(e, t))
    if not threads:
        raise ValueError("no episode holds a policy token to train on")
    prompt_ids, prompt_mask = left_pad([th.prompt for _, th in threads], pad_id, device)
    width = max(len(th.response) for _, th in threads)
    b = len(threads)
    response = torch.full((b, width), pad_id, dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.float32)
    logprobs = torch.zeros((b, width), dtype=torch.float32)
    token_turn = torch.full((b, width), -1, dtype=torch.long)
    versions = []
    for row, (e, th) in enumerate(threads):
        n = len(th.response)
        response[row, :n] = torch.as_tensor(th.response, dtype=torch.long)
        mask[row, :n] = torch.as_tensor(th.mask)
        logprobs[row, :n] = torch.as_tensor(th.logprobs)
        token_turn[row, :n] = torch.as_tensor([flat[(e, t)] if t >= 0 else -1 for t in th.turn_of])
        turn_versions = {episodes[e].turns[t].version for t in th.turn_of if t >= 0}
        versions.append(min(v for v in turn_versions if v is not None))
    rollout = RolloutBatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response.to(device),
        response_mask=mask.to(device),
        logprobs=logprobs.to(device),
        group_ids=torch.as_tensor([episodes[e].uid for e, _ in threads], device=device),
        finished=torch.as_tensor([th.finished for _, th in threads], device=device),
        versions=torch.as_tensor(versions, dtype=torch.long, device=device),
    )
    return AgenticRows(
        rollout, token_turn.to(device), [e for e, _ in threads], versions, turns, episodes
    )
