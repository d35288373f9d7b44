"""The shared-prompt training forward equals a plain forward over prompt + response."""

from __future__ import annotations

import pytest
import torch

from ascent.models import build_tiny_model
from ascent.rollout import SamplingParams, TransformersEngine
from ascent.train.forward import _full_logits, response_logprobs


def test_shared_prompt_forward_matches_plain_forward_in_value_and_gradient():
    model, tok = build_tiny_model()
    prompts = [tok(p)["input_ids"] for p in ("12+34=", "9+9=", "07+45=")]
    engine = TransformersEngine(model, pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id])
    batch = engine.generate(
        prompts, [0, 1, 2], 4, SamplingParams(6), torch.Generator().manual_seed(0)
    )
    mask = batch.response_mask.bool()

    logp, entropy = response_logprobs(model, batch, 0.9, entropy="loss")
    logp[mask].sum().backward()
    shared = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    plain = torch.log_softmax(_full_logits(model, batch) / 0.9, -1)
    plain = plain.gather(-1, batch.response_ids[..., None]).squeeze(-1)
    plain[mask].sum().backward()

    assert torch.allclose(logp[mask], plain[mask], atol=1e-5)
    for a, p in zip(shared, model.parameters(), strict=True):
        assert torch.allclose(a, p.grad, atol=1e-5, rtol=1e-4)
    assert entropy is not None and (entropy[mask] > 0).all()


def test_lora_policy_trains_only_adapters_and_decodes_through_the_fast_path(tmp_path):
    pytest.importorskip("peft")
    from ascent.config.llm_sections import ModelSection
    from ascent.models import load_policy
    from ascent.rollout.decoders import StaticLlamaDecoder

    model, tok = build_tiny_model()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    cfg = ModelSection(name_or_path=str(tmp_path), lora={"enabled": True, "r": 4, "alpha": 8})
    policy = load_policy(cfg, torch.device("cpu"))
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert StaticLlamaDecoder.supports(policy)
    with torch.no_grad():  # adapters that do something (peft starts lora_B at zero)
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)

    prompts = [tok(p)["input_ids"] for p in ("12+34=", "9+9=")]
    batches = []
    for fast in (True, False):
        engine = TransformersEngine(
            policy, pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id], fast=fast
        )
        gen = torch.Generator().manual_seed(0)
        batches.append(engine.generate(prompts, [0, 1], 3, SamplingParams(5), gen))
    batch, generic = batches
    assert torch.equal(batch.response_ids, generic.response_ids)
    logp, _ = response_logprobs(policy, batch)
    mask = batch.response_mask.bool()
    assert torch.allclose(logp[mask], batch.logprobs[mask], atol=1e-5)
    logp[mask].sum().backward()
    assert all(p.grad is not None for n, p in policy.named_parameters() if n in trainable)


def test_the_entropy_metric_equals_the_differentiable_entropy_without_keeping_a_graph():
    model, tok = build_tiny_model()
    engine = TransformersEngine(model, pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id])
    prompts = [tok(p)["input_ids"] for p in ("12+34=", "9+9=")]
    batch = engine.generate(prompts, [0, 1], 3, SamplingParams(5), torch.Generator().manual_seed(1))
    _, for_loss = response_logprobs(model, batch, 0.7, entropy="loss")
    _, metric = response_logprobs(model, batch, 0.7, entropy="metric")
    assert for_loss.requires_grad and not metric.requires_grad
    on = batch.response_mask.bool()  # the positions any loss or metric reads
    assert torch.allclose(for_loss.detach()[on], metric[on], atol=1e-5)
    assert response_logprobs(model, batch, 0.7)[1] is None
