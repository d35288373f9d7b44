"""A Llama block's gated MLP and RMSNorms with backward passes that keep less.

Autograd keeps what each small operation needs for its own gradient, and for a Llama block
under bf16 autocast that is about 37 KB per token and layer (SmolLM2-135M, measured with
saved-tensor hooks): the MLP's gate, up, SiLU and product outputs (four intermediate-size
vectors) beside the bf16 casts of its input, and two float32 hidden-size vectors in each
RMSNorm. With 16 completions of a few hundred tokens that is the peak of a training step.

Written as one autograd function each, they keep only their input and what is costly to
recompute:

    MLP      keeps x, g = x Wg^T, u = x Wu^T; the backward recomputes a = silu(g), h = a u
             and follows autograd's own steps: dWd = dy^T h, dh = dy Wd, du = dh a,
             dg = silu_backward(dh u, g), dx = dg Wg + du Wu, dWg = dg^T x, dWu = du^T x
    RMSNorm  keeps x (the residual stream) and r = rsqrt(mean(x^2) + eps) per token;
             n = x r, y = w n: dw = sum(dy n), dx = r (dy w - n mean(dy w n))

The forward runs the same operations as transformers' modules in the same dtypes (the MLP in
autocast's dtype where autocast is on, the norm in float32), so outputs are equal, and
gradients equal autograd's to rounding (tested). Nothing is recomputed but element-wise
work. Modules that are not plain (LoRA-wrapped projections, biases, another activation)
keep transformers' forward: the check is made at each call, so adapters added later win.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LEAN_MODEL_TYPES = ("llama", "mistral", "qwen2")  # transformers' model_type of the blocks
_NORMS = ("input_layernorm", "post_attention_layernorm")
_NORM_CLASSES = {f"{t.capitalize()}RMSNorm" for t in LEAN_MODEL_TYPES}  # LlamaRMSNorm, ...


def _compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype transformers' Linear would compute in: autocast's where it is on."""
    device = x.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return x.dtype


def _matmul_grad(grad: Tensor, inp: Tensor) -> Tensor:
    """d(x W^T)/dW for batched rows: grad^T inp over every leading dimension."""
    return grad.reshape(-1, grad.shape[-1]).T @ inp.reshape(-1, inp.shape[-1])


class _GatedMLP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, wg: Tensor, wu: Tensor, wd: Tensor, dtype: torch.dtype):
        with torch.autocast(x.device.type, enabled=False):
            xc = x.to(dtype)
            g = F.linear(xc, wg.to(dtype))
            u = F.linear(xc, wu.to(dtype))
            y = F.linear(F.silu(g) * u, wd.to(dtype))
        ctx.save_for_backward(xc, g, u, wg, wu, wd)
        ctx.x_dtype = x.dtype
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        xc, g, u, wg, wu, wd = ctx.saved_tensors
        dtype = xc.dtype
        dy = dy.to(dtype)
        a = F.silu(g)
        need_x, need_wg, need_wu, need_wd = ctx.needs_input_grad[:4]
        dwd = _matmul_grad(dy, a * u).to(wd.dtype) if need_wd else None
        dh = dy @ wd.to(dtype)
        du = dh * a
        dg = torch.ops.aten.silu_backward(dh * u, g)
        del a, dh
        dwg = _matmul_grad(dg, xc).to(wg.dtype) if need_wg else None
        dwu = _matmul_grad(du, xc).to(wu.dtype) if need_wu else None
        dx = None
        if need_x:  # each projection's share in x's dtype, as autograd adds them after autocast
            dx = (dg @ wg.to(dtype)).to(ctx.x_dtype) + (du @ wu.to(dtype)).to(ctx.x_dtype)
        return dx, dwg, dwu, dwd, None


def _upcast(x: Tensor) -> torch.dtype:
    """float32 for bf16 and float32 inputs, as transformers' norm; float64 stays float64."""
    return torch.promote_types(x.dtype, torch.float32)


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float):
        with torch.autocast(x.device.type, enabled=False):
            xf = x.to(_upcast(x))
            r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            y = weight * (xf * r).to(x.dtype)
        ctx.save_for_backward(x, weight, r)
        return y

    @staticmethod
    def backward(ctx, dy: Tensor):
        x, weight, r = ctx.saved_tensors
        upcast = _upcast(x)
        n = x.to(upcast) * r
        dn = dy.to(upcast) * weight.to(upcast)
        dw = None
        if ctx.needs_input_grad[1]:
            dw = (dy.to(upcast) * n).reshape(-1, n.shape[-1]).sum(0).to(weight.dtype)
        dx = r * (dn - n * (dn * n).mean(-1, keepdim=True))
        return dx.to(x.dtype), dw, None


def _plain_mlp(mlp: nn.Module) -> bool:
    parts = (getattr(mlp, name, None) for name in ("gate_proj", "up_proj", "down_proj"))
    linear = all(type(p) is nn.Linear and p.bias is None for p in parts)
    act = type(getattr(mlp, "act_fn", None))
    return linear and (act is nn.SiLU or act.__name__ == "SiLUActivation")  # transformers' own


def _mlp_forward(mlp: nn.Module, x: Tensor) -> Tensor:
    if not torch.is_grad_enabled() or not _plain_mlp(mlp):
        return type(mlp).forward(mlp, x)
    weights = (mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)
    return _GatedMLP.apply(x, *weights, _compute_dtype(x))


def _norm_forward(norm: nn.Module, x: Tensor) -> Tensor:
    if not torch.is_grad_enabled():
        return type(norm).forward(norm, x)
    return _RMSNorm.apply(x, norm.weight, norm.variance_epsilon)


def _llama_norm(module: nn.Module) -> bool:
    """transformers' Llama-style RMSNorm: weight * normalised x (not Gemma's 1 + weight)."""
    return type(module).__name__ in _NORM_CLASSES


def lean_activations(model: nn.Module) -> int:
    """Route the gated MLP and the two RMSNorms of every Llama-family decoder layer of
    `model` through the functions above; returns how many modules now do (0 for other
    architectures, which keep their own forward)."""
    count = 0
    for module in model.modules():
        mlp = getattr(module, "mlp", None)
        norms = [getattr(module, name, None) for name in _NORMS]
        if mlp is None or not all(n is not None and _llama_norm(n) for n in norms):
            continue
        if _plain_mlp(mlp):
            mlp.forward = partial(_mlp_forward, mlp)
            count += 1
        for norm in norms:
            norm.forward = partial(_norm_forward, norm)
            count += 1
    return count
