"""The value model: a head on a trunk, run by the same shared-prompt forward as the policy."""

from __future__ import annotations

import copy

import torch

from ascent.models import build_tiny_model, separate_critic, trunk_of, value_head
from ascent.rollout import SamplingParams, TransformersEngine
from ascent.train.forward import _full_logits, response_values


def rollouts(model, tok):
    prompts = [tok(p)["input_ids"] for p in ("12+34=", "9+9=")]
    engine = TransformersEngine(model, pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id])
    return engine.generate(prompts, [0, 1], 3, SamplingParams(5), torch.Generator().manual_seed(0))


def test_values_from_the_shared_prompt_forward_equal_a_plain_forward_in_value_and_gradient():
    model, tok = build_tiny_model()
    batch = rollouts(model, tok)
    critic = separate_critic(copy.deepcopy(model))
    torch.nn.init.normal_(critic.head.weight, std=0.05)
    mask = batch.response_mask.bool()

    values = response_values(critic, batch)
    values[mask].sum().backward()
    shared = [p.grad.clone() for p in critic.parameters()]
    critic.zero_grad()
    plain = _full_logits(critic, batch).squeeze(-1)
    plain[mask].sum().backward()

    assert values.shape == batch.response_ids.shape
    assert torch.allclose(values[mask], plain[mask], atol=1e-5)
    for a, p in zip(shared, critic.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, atol=1e-5, rtol=1e-3)


def test_a_value_head_shares_the_policy_trunk_and_starts_at_zero():
    model, tok = build_tiny_model()
    head = value_head(model)
    assert head.trunk is trunk_of(model)
    assert {id(p) for p in head.trunk.parameters()} <= {id(p) for p in model.parameters()}
    assert (response_values(head, rollouts(model, tok)) == 0).all()


def test_a_frozen_trunk_gets_no_gradient_from_the_value_loss():
    model, tok = build_tiny_model()
    batch = rollouts(model, tok)
    head = value_head(model)
    head.train_trunk = False
    response_values(head, batch).pow(2).sum().backward()
    assert all(p.grad is None for p in head.trunk.parameters())
    assert head.head.weight.grad is not None
