"""The fused LM head gives the log-probs and gradients of the plain one: lm_head, then
log-softmax over the whole vocabulary, computed here independently."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ascent.models import build_tiny_model, fused_head
from ascent.models.fused_head import head_logprobs
from ascent.rollout import SamplingParams, TransformersEngine
from ascent.train.forward import response_logprobs


def reference(h, w, b, y, temperature):
    z = F.linear(h.double(), w.double(), None if b is None else b.double()) / temperature
    return z.log_softmax(-1).gather(-1, y[:, None]).squeeze(-1)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_values_and_gradients_match_the_plain_head_across_chunks(monkeypatch, bias, temperature):
    monkeypatch.setattr(fused_head, "CHUNK_ELEMENTS", 3 * 50)  # 3 rows a chunk: 7 chunks
    torch.manual_seed(0)
    n, hdim, v = 20, 8, 50
    h = torch.randn(n, hdim, dtype=torch.float64, requires_grad=True)
    w = torch.randn(v, hdim, dtype=torch.float64, requires_grad=True)
    b = torch.randn(v, dtype=torch.float64, requires_grad=True) if bias else None
    y = torch.randint(0, v, (n,))
    weights = torch.randn(n, dtype=torch.float64)  # an arbitrary upstream gradient

    got, entropy = head_logprobs(h, w, b, y, temperature, with_entropy=True)
    (got.double() * weights).sum().backward()
    grads = [h.grad.clone(), w.grad.clone(), None if b is None else b.grad.clone()]
    for t in (h, w, b):
        if t is not None:
            t.grad = None
    want = reference(h, w, b, y, temperature)
    (want * weights).sum().backward()
    assert torch.allclose(got.double(), want, atol=1e-6)
    assert torch.allclose(grads[0], h.grad, atol=1e-6)
    assert torch.allclose(grads[1], w.grad, atol=1e-6)
    if bias:
        assert torch.allclose(grads[2], b.grad, atol=1e-6)
    probs = (F.linear(h, w, b) / temperature).softmax(-1)
    assert torch.allclose(entropy.double(), -(probs * probs.log()).sum(-1), atol=1e-5)


def test_frozen_weight_gets_no_gradient_and_costs_none():
    h = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(30, 8)  # frozen (LoRA keeps the head frozen)
    logp, _ = head_logprobs(h, w, None, torch.tensor([1, 2, 3, 4]))
    logp.sum().backward()
    assert h.grad is not None and w.grad is None


def test_training_forward_takes_the_fused_path_and_equals_the_logits_path(monkeypatch):
    """The tiny Llama through `response_logprobs` (fused head) against its own logits."""
    model, tok = build_tiny_model()
    engine = TransformersEngine(model, pad_id=tok.pad_token_id, eos_ids=[tok.eos_token_id])
    prompts = [tok(p)["input_ids"] for p in ("12+34=", "9+9=", "5+")]
    batch = engine.generate(prompts, [0, 1, 2], 4, SamplingParams(6), torch.Generator())
    calls = []
    original = fused_head._HeadLogProbs.apply
    monkeypatch.setattr(
        fused_head._HeadLogProbs, "apply", lambda *a: calls.append(1) or original(*a)
    )
    logp, entropy = response_logprobs(model, batch, 0.8, entropy="metric")
    assert calls  # the fused head ran
    ids = torch.cat([batch.prompt_ids, batch.response_ids], -1)
    mask = torch.cat([batch.prompt_mask, torch.ones_like(batch.response_ids)], -1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    p = batch.prompt_ids.shape[1]
    want = reference(
        logits[:, p - 1 : -1].reshape(-1, logits.shape[-1]),
        torch.eye(logits.shape[-1]), None, batch.response_ids.reshape(-1), 0.8,
    ).view(batch.response_ids.shape).float()  # fmt: skip
    on = batch.response_mask.bool()
    assert torch.allclose(logp[on], want[on], atol=1e-5)
    assert (logp[~on] == 0).all() and (entropy[on] > 0).all()
