"""Incremental decoders behind the transformers engine: prefill once, then one token per step.

Both share the engine's contract: `prefill(prompt_ids, prompt_mask, n, max_new_tokens)` runs
each distinct prompt once and returns next-token logits for its `n` copies; `step(tokens)`
appends one token per row and returns the next logits; `keep(rows)` drops the rows that have
ended, so the rest decode without carrying them (a batch of sampled completions ends
raggedly: most rows stop long before the longest).

- `StaticLlamaDecoder`, the fast path for Llama-family models (Llama, Qwen2, Mistral, all
  without a sliding window; LoRA adapters included): a plain function of `PackedLlama`, the
  model's weights packed for decoding (query, key and value projections in one matrix, LoRA
  merged, in the decode dtype; in bf16 on a CPU, in oneDNN's blocked layout, with the MLP's
  activation and product and the residual sums done inside the matrix products), with no
  per-step mask building, cache objects or output dataclasses. Each prompt's keys and
  values are held once for the n rows of its group (a group's completions share their
  prompt: at 16 prompts x 8 this reads the prompts' cache 8 times less), each row's own
  tokens in a cache preallocated for the whole generation. Attention and norms run in C
  kernels where they are built (`NativeAttention`: bf16 on a CPU, `native.py`), else in
  torch operations (`TorchAttention`).
- `CacheDecoder`, for any other causal LM: the model's own forward with its dynamic cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ascent.models.interface import base_model, call_with_cache, output_cache, prompt_positions
from ascent.rollout.native import (
    BLOCK,
    DecodeKernels,
    LayerCache,
    Rows,
    decode_kernels,
    padded,
    tiled,
)

FAST_MODEL_TYPES = frozenset({"llama", "qwen2", "mistral"})


def _rms_norm(weight: Tensor, eps: float, x: Tensor) -> Tensor:
    """The Llama RMSNorm as one fused kernel (statistics in float32 whatever the dtype)."""
    return F.rms_norm(x, weight.shape, weight, eps)


def _rotary(w: PackedLlama, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
    """cos and sin * sign, (B, T, 1, d), in x's dtype: rotate_half(x) = cat(-x2, x1) =
    roll(x, d / 2) * sign, so queries and keys rotate with one roll and one multiply-add."""
    cos, sin = w.rotary(x, positions)
    sign = torch.ones(w.head_dim, dtype=x.dtype, device=x.device)
    sign[: w.head_dim // 2] = -1
    return cos.to(x.dtype).unsqueeze(2), (sin.to(x.dtype) * sign).unsqueeze(2)


def _lora_only(model: nn.Module) -> bool:
    """A peft model whose every adapter is LoRA (prompt or prefix tuning change the inputs,
    which this decoder would not reproduce)."""
    configs = getattr(model, "peft_config", None) or {}
    return bool(configs) and all(c.peft_type == "LORA" for c in configs.values())


def linear_weight(linear: nn.Module) -> tuple[Tensor, Tensor | None]:
    """(weight, bias) a linear layer applies, a peft LoRA layer's active adapters merged in
    (W + scale * B A), so the decoder computes what the layer's forward would."""
    base = getattr(linear, "base_layer", None)
    if base is None:
        return linear.weight, linear.bias
    weight = base.weight
    if not getattr(linear, "disable_adapters", False) and not getattr(linear, "merged", False):
        for name in linear.active_adapters:
            if name in linear.lora_A:
                weight = weight + linear.get_delta_weight(name).to(weight.dtype)
    return weight, base.bias


@functools.cache
def onednn_prepacks(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether matrix products of this dtype and device go through oneDNN with weights
    reordered once into its blocked layout (what torch.compile's CPU backend does with frozen
    weights): bfloat16 on a CPU where oneDNN reports bf16 support (native with AMX or
    AVX512-BF16, measured; emulated on plain AVX-512, not measured). On 2 cores with AMX at
    the decode shape (128 rows): 2,150-2,900 GFLOP/s against 1,450-2,000 for F.linear on the
    plain layout, the same results. float32 stays on F.linear (no faster there, and its
    log-probs stay the trainer's to rounding). The private operators are tried once on a
    small layer: a build where any of them is missing or fails decodes on F.linear."""
    if device.type != "cpu" or dtype != torch.bfloat16 or not torch.backends.mkldnn.is_available():
        return False
    try:
        ops = torch.ops.mkldnn
        if not ops._is_mkldnn_bf16_supported():
            return False
        packed = ops._reorder_linear_weight(torch.eye(16, dtype=dtype), None)
        x = torch.ones(2, 16, dtype=dtype)  # so every output below is one value throughout
        outs = {
            1.0: ops._linear_pointwise(x, packed, None, "none", [], ""),
            0.7311: ops._linear_pointwise(x, packed, None, "swish", [], ""),  # silu(1)
            2.0: ops._linear_pointwise.binary(x, x, packed, None, "add"),
        }
        return all(torch.allclose(out.float(), torch.full((2, 16), v), atol=0.01)
                   for v, out in outs.items())  # fmt: skip
    except (AttributeError, RuntimeError):
        return False


@dataclass(frozen=True)
class DecodeLinear:
    """One linear layer as the decoder applies it: on F.linear, or on oneDNN with the weight
    prepacked, where the activation, product or sum that follows runs inside the matrix
    product's kernel instead of as an operation of its own."""

    weight: Tensor  # (out, in), or oneDNN's packed layout of it
    bias: Tensor | None
    packed: bool

    @staticmethod
    def build(weight: Tensor, bias: Tensor | None, dtype: torch.dtype) -> DecodeLinear:
        weight = weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
        if not onednn_prepacks(dtype, weight.device):
            return DecodeLinear(weight, bias, False)
        return DecodeLinear(torch.ops.mkldnn._reorder_linear_weight(weight, None), bias, True)

    def __call__(self, x: Tensor) -> Tensor:
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")
        return F.linear(x, self.weight, self.bias)

    def silu(self, x: Tensor) -> Tensor:
        """silu(linear(x))."""
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "swish", [], "")
        return F.silu(F.linear(x, self.weight, self.bias), inplace=True)

    def times(self, x: Tensor, other: Tensor) -> Tensor:
        """linear(x) * other (`other` of the output's shape: the fused path does not
        broadcast)."""
        if self.packed:
            return self._binary(x, other, "mul")
        out = F.linear(x, self.weight, self.bias)
        return out.mul_(other) if out.dtype == other.dtype else out * other

    def plus(self, x: Tensor, other: Tensor) -> Tensor:
        """linear(x) + other (a residual connection; `other` of the output's shape). Under
        autocast a float32 decode's linear layers give bf16 while the residual stream is
        float32: the sum is then float32, as in the model's own forward."""
        if self.packed:
            return self._binary(x, other, "add")
        out = F.linear(x, self.weight, self.bias)
        return out.add_(other) if out.dtype == other.dtype else out + other

    def _binary(self, x: Tensor, other: Tensor, op: str) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise.binary(x, other, self.weight, self.bias, op)


def _stacked(parts: list[tuple[Tensor, Tensor | None]], dtype: torch.dtype) -> DecodeLinear:
    """Several linear layers over the same input as one (their outputs side by side)."""
    weight = torch.cat([w.to(dtype) for w, _ in parts])
    if all(b is None for _, b in parts):
        return DecodeLinear.build(weight, None, dtype)
    bias = [b if b is not None else w.new_zeros(w.shape[0]) for w, b in parts]
    return DecodeLinear.build(weight, torch.cat([b.to(dtype) for b in bias]), dtype)


@dataclass(frozen=True)
class PackedLayer:
    in_norm: Tensor  # (H,)
    qkv: DecodeLinear  # H -> (heads + 2 kv_heads) * d: q, k and v projections stacked
    out: DecodeLinear  # heads * d -> H
    post_norm: Tensor  # (H,)
    gate: DecodeLinear  # H -> I
    up: DecodeLinear  # H -> I
    down: DecodeLinear  # I -> H


@dataclass(frozen=True)
class PackedLlama:
    """A Llama-family model's weights as the decoder reads them, in one dtype. Built from
    the module for each generate call (a copy: the trainer's float32 master weights may be
    decoded in bf16, and LoRA deltas are merged in), so it always holds the current weights."""

    embed: Tensor  # (V, H)
    layers: list[PackedLayer]
    norm: Tensor  # (H,)
    head: DecodeLinear  # H -> V
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    rotary: nn.Module  # the model's rotary embedding: (x, positions) -> (cos, sin)

    @staticmethod
    @torch.no_grad()
    def from_model(model: nn.Module, dtype: torch.dtype) -> PackedLlama:
        inner = base_model(model)
        core, cfg = inner.model, inner.config
        layers = []
        for layer in core.layers:
            attn, mlp = layer.self_attn, layer.mlp
            layers.append(
                PackedLayer(
                    in_norm=layer.input_layernorm.weight.to(dtype),
                    qkv=_stacked(
                        [linear_weight(m) for m in (attn.q_proj, attn.k_proj, attn.v_proj)], dtype
                    ),
                    out=DecodeLinear.build(*linear_weight(attn.o_proj), dtype),
                    post_norm=layer.post_attention_layernorm.weight.to(dtype),
                    gate=DecodeLinear.build(*linear_weight(mlp.gate_proj), dtype),
                    up=DecodeLinear.build(*linear_weight(mlp.up_proj), dtype),
                    down=DecodeLinear.build(*linear_weight(mlp.down_proj), dtype),
                )
            )
        heads = cfg.num_attention_heads
        return PackedLlama(
            embed=core.embed_tokens.weight.to(dtype),
            layers=layers,
            norm=core.norm.weight.to(dtype),
            head=DecodeLinear.build(*linear_weight(inner.lm_head), dtype),
            eps=core.norm.variance_epsilon,
            heads=heads,
            kv_heads=cfg.num_key_value_heads,
            head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads,
            rotary=core.rotary_emb,
        )


class TorchAttention:
    """Decode-time attention in torch operations, for any dtype and head shape: each prompt's
    keys and values held once for its group and read with one matrix product per prompt
    (a group's completions share their prompt: at 16 prompts x 8 this reads the prompts'
    cache 8 times less), each row's own tokens in a cache preallocated for the generation,
    compacted when rows leave."""

    def __init__(self, w: PackedLlama, n: int, valid: Tensor, max_new_tokens: int) -> None:
        self.w, self.n = w, n
        self.dtype = w.embed.dtype
        u = valid.shape[0]
        # Each row's cache is read in place in float32 (measured on 2 cores at 128 rows x 64
        # positions: 0.39 ms a layer against 0.77 copying first) but copied out first in
        # bfloat16, where torch sends a strided batch of matrix products to a path 3-4x slower
        # than the copy (measured on AMX). Tried for a bf16 model and slower end to end: a
        # float32 cache read in place (7%: twice the bytes), and a cache grown in chunks of
        # 32 positions and read whole, the unwritten ones masked (2%: its contiguous bf16
        # products of 3 x 64 by 64 x 32k are no faster than the copy and the product).
        self.copy_cache = self.dtype != torch.float32
        self.shape = (u * n, w.kv_heads, max_new_tokens, w.head_dim)
        self.prompt_keys: list[Tensor] = []
        self.prompt_values: list[Tensor] = []
        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        pad_bias = torch.zeros(valid.shape, dtype=torch.float32, device=valid.device)
        pad_bias.masked_fill_(~valid, float("-inf"))
        self.prompt_bias = pad_bias.repeat_interleave(n, dim=0)[:, None, None]  # (B, 1, 1, P)
        self.groups = u
        self.rows = torch.arange(u * n, device=valid.device)  # each row's place among u x n

    def add_prompt(self, k: Tensor, v: Tensor) -> None:
        """One layer's prompt keys and values, (U, kv, P, d), rotated."""
        self.prompt_keys.append(k.transpose(-1, -2).contiguous())  # (U, kv, d, P)
        self.prompt_values.append(v.contiguous())  # (U, kv, P, d)
        self.keys.append(k.new_empty(self.shape))
        self.values.append(k.new_empty(self.shape))

    def prepare(self, x: Tensor, positions: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """A step's rotary tables, (B, 1, 1, d) in the decode dtype; and its score bias,
        the prompts' pads masked, for own positions 0..t."""
        own = self.prompt_bias.new_zeros((x.shape[0], 1, 1, t + 1))
        self.bias = torch.cat([self.prompt_bias, own], dim=-1)
        return _rotary(self.w, x, positions)

    def layer(self, i: int, qkv: Tensor, rotary: tuple[Tensor, Tensor], t: int) -> Tensor:
        """(B, 1, heads * d) attention output of layer i at own position t, from its (B, 1,
        (heads + 2 kv) * d) projections: q and k rotated (both at once: they are neighbours),
        k and v written to the rows' caches, q attending."""
        w = self.w
        b = qkv.shape[0]
        qkv = qkv.view(b, -1, w.head_dim)
        qk, v = qkv[:, : w.heads + w.kv_heads], qkv[:, w.heads + w.kv_heads :]
        cos, sin = (r[:, 0] for r in rotary)
        qk = torch.addcmul(qk * cos, qk.roll(w.head_dim // 2, dims=-1), sin)
        self.keys[i][:, :, t] = qk[:, w.heads :]
        self.values[i][:, :, t] = v
        return self._attend(i, qk[:, : w.heads], t)

    def _by_group(self, rows: Tensor, per_prompt: Tensor) -> Tensor:
        """(B, kv, g, a) per row @ (U, kv, a, c) per prompt -> (B, kv, g, c): one matrix
        product per prompt and key/value head over the queries of all its rows, so the
        prompt's cache is read once for its group instead of once a row."""
        u, n = self.groups, self.n
        b, kv, g, a = rows.shape
        if b != u * n:  # some rows have ended: their places are zeros
            full = rows.new_zeros((u * n, kv, g, a))
            full[self.rows] = rows
            rows = full
        grouped = rows.view(u, n, kv, g, a).transpose(1, 2).reshape(u, kv, n * g, a)
        out = torch.matmul(grouped, per_prompt)
        out = out.view(u, kv, n, g, -1).transpose(1, 2).reshape(u * n, kv, g, -1)
        return out if b == u * n else out[self.rows]

    def _attend(self, i: int, q: Tensor, t: int) -> Tensor:
        """One new query per row, (B, heads, d), over its prompt and its own tokens 0..t:
        scores of both parts, one float32 softmax over them (the bias masks the prompt's
        pads), and the two weighted sums added. Query head h reads key/value head
        h // (heads / kv_heads), as grouped-query attention does."""
        w = self.w
        b = q.shape[0]
        g = w.heads // w.kv_heads
        qg = q.reshape(b, w.kv_heads, g, w.head_dim)
        own_keys, own_values = self.keys[i][:, :, : t + 1], self.values[i][:, :, : t + 1]
        if self.copy_cache:
            own_keys, own_values = own_keys.contiguous(), own_values.contiguous()
        prompt = self._by_group(qg, self.prompt_keys[i])
        own = torch.matmul(qg, own_keys.transpose(-1, -2))
        # bias + scale * scores in one float32 operation (the bias masks the prompts' pads)
        scores = torch.add(self.bias, torch.cat([prompt, own], dim=-1), alpha=w.head_dim**-0.5)
        probs = torch.softmax(scores, dim=-1).to(q.dtype)
        p = prompt.shape[-1]
        out = self._by_group(probs[..., :p], self.prompt_values[i])
        out = out + torch.matmul(probs[..., p:], own_values)
        return out.reshape(b, 1, w.heads * w.head_dim)

    def keep(self, rows: Tensor, t: int) -> None:
        """Go on with these rows only (indices into the current rows), t positions each.
        The prompts' caches stay as they are; each kept row's own cache is copied."""
        for cache in (self.keys, self.values):
            for i, full in enumerate(cache):
                kept = full.new_empty((len(rows), *full.shape[1:]))
                kept[:, :, :t] = full[rows, :, :t]
                cache[i] = kept
        self.rows = self.rows[rows]
        self.prompt_bias = self.prompt_bias[rows]


class NativeAttention:
    """Decode-time attention in one C call a layer (`decode_kernels.c`, bf16 caches):
    rotary embedding, cache write and attention over the row's prompt and own tokens, in
    float32. Rows that end are skipped, not copied: each active row names its place in the
    caches. Prompts must be left-padded (the engine's `left_pad`): each one's pads are a
    prefix, skipped."""

    def __init__(
        self, w: PackedLlama, n: int, valid: Tensor, max_new_tokens: int, kernel: DecodeKernels
    ) -> None:
        self.w, self.n, self.kernel = w, n, kernel
        u, p = valid.shape
        start = (p - valid.sum(dim=1)).to(torch.long).contiguous()  # first real position
        self.rows = Rows(torch.arange(u * n), start, n)
        own = padded(max_new_tokens)
        self.shape = (u * n, w.kv_heads, own // BLOCK, w.head_dim, BLOCK)  # keys, tiled
        self.max_new_tokens = max_new_tokens
        self.caches: list[LayerCache] = []
        g = w.heads // w.kv_heads
        self.scratch = torch.empty(torch.get_num_threads() * g * (padded(p) + own))
        self.sign = torch.ones(w.head_dim)
        self.sign[: w.head_dim // 2] = -1

    @staticmethod
    def usable(w: PackedLlama, valid: Tensor) -> DecodeKernels | None:
        """The kernel, where it runs this model and batch: bf16 weights on a CPU, a head
        shape it was built for, left-padded prompts, and a kernel built for this machine."""
        if w.embed.dtype != torch.bfloat16 or w.embed.device.type != "cpu":
            return None
        if not DecodeKernels.supports(w.heads, w.kv_heads, w.head_dim):
            return None
        first = valid.shape[1] - valid.sum(dim=1, keepdim=True)
        if not torch.equal(valid, torch.arange(valid.shape[1]) >= first):  # pads not a prefix
            return None
        return decode_kernels()

    def add_prompt(self, k: Tensor, v: Tensor) -> None:
        """One layer's prompt keys and values, (U, kv, P, d), rotated."""
        u, kv, _, d = k.shape
        own_values = k.new_empty((u * self.n, kv, self.max_new_tokens, d))
        # positions past t are never read: the own caches need no zeros
        self.caches.append(
            LayerCache(tiled(k), v.contiguous(), k.new_empty(self.shape), own_values)
        )

    def prepare(self, x: Tensor, positions: Tensor, t: int) -> tuple[Tensor, Tensor]:
        """A step's rotary tables: cos and sin * sign, (B, d), in float32."""
        cos, sin = self.w.rotary(x.float(), positions)
        b = x.shape[0]
        return cos.reshape(b, -1).contiguous(), (sin.reshape(b, -1) * self.sign).contiguous()

    def layer(self, i: int, qkv: Tensor, rotary: tuple[Tensor, Tensor], t: int) -> Tensor:
        """(B, 1, heads * d) attention output of layer i at own position t."""
        w = self.w
        b = qkv.shape[0]
        out = qkv.new_empty((b, 1, w.heads * w.head_dim))
        self.kernel.attention(
            qkv.view(b, -1, w.head_dim), rotary, self.caches[i], self.rows, out, self.scratch,
            t=t, scale=w.head_dim**-0.5,
        )  # fmt: skip
        return out

    def keep(self, rows: Tensor, t: int) -> None:
        """Go on with these rows only (indices into the current rows): nothing is copied."""
        self.rows = Rows(self.rows.active[rows].contiguous(), self.rows.start, self.n)


class StaticLlamaDecoder:
    """Decode a Llama-family model with a static KV cache and no per-token framework overhead.

    Attention runs in the C kernel where it can (`NativeAttention`: bf16 on a CPU with a C
    compiler), else in torch operations (`TorchAttention`); `native=False` forces the
    latter, `native=True` requires the former."""

    def __init__(self, packed: PackedLlama, native: bool | None = None) -> None:
        self.w = packed
        self.native = native
        self.norm: Callable[[Tensor, float, Tensor], Tensor] = _rms_norm

    @staticmethod
    def supports(model: nn.Module) -> bool:
        """A Llama-family model whose every piece this decoder reproduces, plain or with LoRA
        adapters (merged into the packed weights)."""
        inner = base_model(model)
        if inner is not model and not _lora_only(model):
            return False
        cfg = inner.config
        core = getattr(inner, "model", None)
        if cfg.model_type not in FAST_MODEL_TYPES or core is None or cfg.hidden_act != "silu":
            return False
        if getattr(cfg, "sliding_window", None) is not None:  # windowed attention: not here
            return False
        attn = core.layers[0].self_attn
        return not hasattr(attn, "q_norm") and hasattr(core, "rotary_emb")

    def _finish_layer(self, layer: PackedLayer, x: Tensor, attn_out: Tensor) -> Tensor:
        """Output projection, residual, MLP, residual; `attn_out` is (B, T, heads * d)."""
        x = layer.out.plus(attn_out, x)
        h = self.norm(layer.post_norm, self.w.eps, x)
        return layer.down.plus(layer.up.times(h, layer.gate.silu(h)), x)

    def _logits(self, x: Tensor) -> Tensor:
        return self.w.head(self.norm(self.w.norm, self.w.eps, x))

    def _attention(
        self, valid: Tensor, n: int, max_new_tokens: int
    ) -> TorchAttention | NativeAttention:
        """The attention for this batch, and the norm that goes with it (both in C, or both
        in torch operations)."""
        kernel = None if self.native is False else NativeAttention.usable(self.w, valid)
        if kernel is not None:
            self.norm = kernel.rms_norm
            return NativeAttention(self.w, n, valid, max_new_tokens, kernel)
        if self.native:
            raise RuntimeError("the decode-attention kernel cannot run this model or batch")
        self.norm = _rms_norm
        return TorchAttention(self.w, n, valid, max_new_tokens)

    def _qkv(self, layer: PackedLayer, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, ...]:
        """(B, T, heads, d) queries and (B, T, kv_heads, d) keys and values, q and k rotated
        (both at once: they are neighbours in the stacked projection's output)."""
        w = self.w
        b, t, _ = x.shape
        h = self.norm(layer.in_norm, w.eps, x)
        qkv = layer.qkv(h).view(b, t, -1, w.head_dim)
        qk, v = qkv[:, :, : w.heads + w.kv_heads], qkv[:, :, w.heads + w.kv_heads :]
        qk = torch.addcmul(qk * cos, qk.roll(w.head_dim // 2, dims=-1), sin)
        return qk[:, :, : w.heads], qk[:, :, w.heads :], v

    def prefill(
        self, prompt_ids: Tensor, prompt_mask: Tensor, n: int, max_new_tokens: int
    ) -> Tensor:
        w = self.w
        u, p = prompt_ids.shape
        positions = prompt_positions(prompt_mask)
        valid = prompt_mask.bool()
        self.attn = self._attention(valid, n, max_new_tokens)
        x = F.embedding(prompt_ids, w.embed)
        cos, sin = _rotary(w, x, positions)
        causal = torch.ones(p, p, dtype=torch.bool, device=x.device).tril()
        # A left-pad query attends to itself only, so it stays finite (its output is unused).
        allowed = (causal & valid[:, None, :]) | torch.eye(p, dtype=torch.bool, device=x.device)
        bias = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device)
        bias = bias.masked_fill(~allowed, float("-inf"))[:, None]
        gqa = w.heads != w.kv_heads
        for layer in w.layers:
            q, k, v = (part.transpose(1, 2) for part in self._qkv(layer, x, cos, sin))
            self.attn.add_prompt(k, v)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)
            x = self._finish_layer(layer, x, out.transpose(1, 2).reshape(u, p, -1))
        self.length = 0  # positions generated so far
        self.next_position = positions[:, -1:].repeat_interleave(n, dim=0) + 1
        return self._logits(x[:, -1]).repeat_interleave(n, dim=0)

    def step(self, tokens: Tensor) -> Tensor:
        w, t = self.w, self.length
        x = F.embedding(tokens[:, None], w.embed)
        tables = self.attn.prepare(x, self.next_position, t)
        for i, layer in enumerate(w.layers):
            qkv = layer.qkv(self.norm(layer.in_norm, w.eps, x))
            x = self._finish_layer(layer, x, self.attn.layer(i, qkv, tables, t))
        self.length += 1
        self.next_position = self.next_position + 1
        return self._logits(x[:, -1])

    def keep(self, rows: Tensor) -> None:
        """Go on with these rows only (indices into the current rows)."""
        self.attn.keep(rows, self.length)
        self.next_position = self.next_position[rows]


class CacheDecoder:
    """Any transformers causal LM, through its own forward and dynamic KV cache."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def prefill(
        self, prompt_ids: Tensor, prompt_mask: Tensor, n: int, max_new_tokens: int
    ) -> Tensor:
        positions = prompt_positions(prompt_mask)
        out = self.model(
            input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions, use_cache=True
        )
        self.past = output_cache(out)
        self.past.batch_repeat_interleave(n)
        ones = prompt_mask.new_ones(prompt_mask.shape[0] * n, max_new_tokens)
        self.mask = torch.cat([prompt_mask.repeat_interleave(n, dim=0), ones], dim=-1)
        self.length = prompt_ids.shape[1]
        self.next_position = positions[:, -1:].repeat_interleave(n, dim=0) + 1
        return out.logits[:, -1].repeat_interleave(n, dim=0)

    def step(self, tokens: Tensor) -> Tensor:
        self.length += 1
        out = call_with_cache(
            self.model,
            self.past,
            input_ids=tokens[:, None],
            attention_mask=self.mask[:, : self.length],
            position_ids=self.next_position,
            use_cache=True,
        )
        self.past = output_cache(out)
        self.next_position = self.next_position + 1
        return out.logits[:, -1]

    def keep(self, rows: Tensor) -> None:
        """Go on with these rows only (indices into the current rows)."""
        self.past.batch_select_indices(rows)
        self.mask = self.mask[rows]
        self.next_position = self.next_position[rows]
