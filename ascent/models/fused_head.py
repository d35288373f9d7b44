"""Log-probabilities of chosen tokens straight from hidden states, without the batch's logits.

A real model's vocabulary makes the LM head the largest tensor of a training step: 16 rows
of 200 tokens over SmolLM2's 49,152 tokens are 630 MB of float32 logits, and the log-softmax,
its upcast and their gradients are as many more. Here the head runs over a few hundred
positions at a time, keeps only each position's log-sum-exp, and recomputes the chunk's
logits in the backward pass (as fused linear cross-entropy kernels do):

    z = h W^T / temperature          (chunk of positions x vocabulary, float32)
    log p(y) = z_y - logsumexp(z)
    d log p(y) / d z = onehot(y) - softmax(z)

Only the positions the loss reads (the response mask) are computed. The result equals
`logprobs_from_logits(lm_head(h), y, temperature)` to float rounding (tested, values and
gradients).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

CHUNK_ELEMENTS = 1 << 25  # float32 logits held at once: 128 MiB (680 positions at 49k tokens)


def _chunk_logits(hidden: Tensor, weight: Tensor, bias: Tensor | None, temperature: float):
    z = F.linear(hidden, weight, bias).float()
    return z if temperature == 1.0 else z.div_(temperature)


class _HeadLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, with_entropy):
        w = weight.to(hidden.dtype)  # the compute dtype's copy of float32 master weights
        b = None if bias is None else bias.to(hidden.dtype)
        n, v = hidden.shape[0], weight.shape[0]
        rows = max(1, CHUNK_ELEMENTS // v)
        logp = hidden.new_empty(n, dtype=torch.float32)
        lse = hidden.new_empty(n, dtype=torch.float32)
        entropy = hidden.new_zeros(n, dtype=torch.float32)
        for s in range(0, n, rows):
            z = _chunk_logits(hidden[s : s + rows], w, b, temperature)
            norm = torch.logsumexp(z, -1)
            lse[s : s + rows] = norm
            logp[s : s + rows] = z.gather(-1, targets[s : s + rows, None]).squeeze(-1) - norm
            if with_entropy:  # logsumexp(z) - sum softmax(z) z: finite where p underflows
                p = (z - norm[:, None]).exp_()
                entropy[s : s + rows] = norm - (p * z).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        temperature = ctx.temperature
        w = weight.to(hidden.dtype)
        b = None if bias is None else bias.to(hidden.dtype)
        n, v = hidden.shape[0], weight.shape[0]
        rows = max(1, CHUNK_ELEMENTS // v)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        )
        grad_b = torch.zeros(v, dtype=torch.float32, device=weight.device) if need_b else None
        for s in range(0, n, rows):
            h = hidden[s : s + rows]
            z = _chunk_logits(h, w, b, temperature)
            g = z.sub_(lse[s : s + rows, None]).exp_().neg_()  # -softmax(z), in place
            g.scatter_add_(-1, targets[s : s + rows, None], torch.ones_like(g[:, :1]))
            g.mul_((grad_logp[s : s + rows] / temperature)[:, None])
            if need_b:
                grad_b += g.sum(0)
            g = g.to(hidden.dtype)
            if need_h:
                grad_h[s : s + rows] = g @ w
            if need_w:
                grad_w += (g.t() @ h).float()
        grad_w = grad_w.to(weight.dtype) if need_w else None
        grad_b = grad_b.to(bias.dtype) if need_b else None
        return grad_h, grad_w, grad_b, None, None, None


def head_logprobs(
    hidden: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    temperature: float = 1.0,
    *,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor]:
    """log softmax(h W^T + b / temperature)[y] for each row, and optionally its entropy.

    Args:
        hidden: (N, H) final hidden states (after the model's last norm), compute dtype.
        weight: (V, H) LM head weight (float32 master weights are cast to hidden's dtype).
        bias: (V,) or None.
        targets: (N,) long token ids.
        temperature: logits are divided by it after the upcast to float32, as when sampling.
        with_entropy: also return the entropy of each row's distribution (no gradient).

    Returns:
        (N,) float32 log-probabilities, differentiable in hidden, weight and bias; (N,)
        float32 entropies (zeros unless asked for).
    """
    device = hidden.device.type
    if torch.is_autocast_enabled(device):  # the head's products in the autocast dtype, as
        hidden = hidden.to(torch.get_autocast_dtype(device))  # autocast's lm_head would run
    with torch.autocast(device, enabled=False):
        return _HeadLogProbs.apply(hidden, weight, bias, targets, temperature, with_entropy)
