"""The static decoder's pieces: decode-time linear layers (oneDNN-prepacked with fused
activation, product and residual sum, or plain F.linear) against an independent float64
computation, and a bf16 decode against a float32 forward."""

from __future__ import annotations

import pytest
import torch

from ascent.rollout import SamplingParams, TransformersEngine
from ascent.rollout.decoders import DecodeLinear, PackedLlama, onednn_prepacks
from ascent.train.forward import response_logprobs

from .test_engine import EOS, PAD, PROMPTS, small, with_eos_bias

BF16 = torch.bfloat16
CPU = torch.device("cpu")
PREPACKS = onednn_prepacks(BF16, CPU)


def layer(packed: bool, bias: bool) -> tuple[DecodeLinear, torch.Tensor, torch.Tensor | None]:
    """A bf16 decode layer (48 -> 40) and the bf16 weight and bias it holds."""
    torch.manual_seed(0)
    weight = (torch.randn(40, 48) / 7).to(BF16)
    b = (torch.randn(40) / 3).to(BF16) if bias else None
    if packed:
        return DecodeLinear.build(weight, b, BF16), weight, b
    return DecodeLinear(weight, b, False), weight, b


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("shape", [(5, 48), (3, 2, 48)])
def test_decode_linear_and_its_fused_followers_equal_a_float64_computation(packed, bias, shape):
    if packed and not PREPACKS:
        pytest.skip("oneDNN bf16 is not available on this CPU")
    lin, weight, b = layer(packed, bias)
    assert lin.packed is packed
    x = torch.randn(shape).to(BF16)
    other = torch.randn((*shape[:-1], 40)).to(BF16)
    # the reference, by hand in float64 from the same bf16 values
    ref = x.double() @ weight.double().T + (0 if b is None else b.double())
    expected = {
        "linear": ref,
        "silu": ref / (1 + torch.exp(-ref)),
        "times": ref * other.double(),
        "plus": ref + other.double(),
    }
    got = {"linear": lin(x), "silu": lin.silu(x), "times": lin.times(x, other),
           "plus": lin.plus(x, other)}  # fmt: skip
    for name, out in got.items():
        assert out.dtype == BF16 and out.shape == (*shape[:-1], 40), name
        # bf16 keeps 8 bits: within 1% of the result's scale (rounding once or twice)
        tolerance = 0.01 * expected[name].abs().max().item()
        assert (out.double() - expected[name]).abs().max() <= tolerance, name


def test_bf16_weights_are_prepacked_on_a_cpu_with_onednn_and_float32_ones_never():
    model = small("llama-bias")
    bf16 = PackedLlama.from_model(model, BF16)
    f32 = PackedLlama.from_model(model, torch.float32)
    names = ("qkv", "out", "gate", "up", "down")
    layers = [bf16.head] + [getattr(ly, n) for ly in bf16.layers for n in names]
    assert all(lin.packed is PREPACKS for lin in layers)
    assert not f32.head.packed and not any(ly.qkv.packed for ly in f32.layers)
    assert f32.layers[0].qkv.weight.shape == (32 + 2 * 16, 32)  # q, k and v stacked


def test_a_float32_decode_under_autocast_keeps_its_residual_stream_in_float32():
    """Test-time RL decodes the float32 master weights inside the trainer's bf16 autocast:
    the linear layers then give bf16, and the residual sum must still be float32, as in the
    model's own forward (an in-place add into the bf16 output would round it every layer)."""
    torch.manual_seed(0)
    lin = DecodeLinear.build(torch.randn(40, 48), None, torch.float32)
    x, residual = torch.randn(5, 48), torch.randn(5, 40)
    with torch.autocast("cpu", dtype=BF16):
        summed, product = lin.plus(x, residual), lin.times(x, residual)
        reference = torch.nn.functional.linear(x, lin.weight)  # bf16 under autocast
    assert reference.dtype == BF16
    assert summed.dtype == torch.float32 and product.dtype == torch.float32
    assert torch.equal(summed, reference.float() + residual)
    assert torch.equal(product, reference.float() * residual)


def test_bf16_decoding_follows_a_float32_forward_to_bf16_rounding():
    """The bf16 path (where oneDNN runs bf16: prepacked weights with the MLP's activation
    and product and both residual sums inside the matrix products; each row's cache copied
    out for its products; rows that end leaving the batch) against a float32 teacher-forced
    forward of the same weights. The head is scaled up so log-probs spread over nats instead
    of sitting near uniform; there rounding stays within hundredths (measured 0.0055 mean,
    0.024 max without the EOS bias) where a residual scaled by 0.99 already gives 0.015
    mean."""
    model = small("llama-bias")  # GQA (4 heads, 2 key/value heads) and every bias
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)
    model = with_eos_bias(model, 0.0)  # untied, scaled weights kept: about half the rows end
    engine = TransformersEngine(model, pad_id=PAD, eos_ids=[EOS], dtype=BF16)
    params = SamplingParams(16, temperature=0.8)
    gen = torch.Generator().manual_seed(0)
    batch = engine.generate(PROMPTS["ragged"], [0, 1, 2], 8, params, gen)
    assert batch.finished.any() and not batch.finished.all()
    logp, _ = response_logprobs(model, batch, temperature=0.8)
    mask = batch.response_mask.bool()
    gap = (logp[mask] - batch.logprobs[mask]).abs()
    assert logp[mask].std() > 0.5  # the log-probs do spread
    assert gap.mean() < 0.012 and gap.max() < 0.06
