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
  values are held once for the n rows of its group and read with one matrix product per
  prompt (a group's completions share their prompt: at 16 prompts x 8 this reads the
  prompts' cache 8 times less), each row's own tokens in a cache preallocated for the whole
  generation.
- `CacheDecoder`, for any other causal LM: the model's own forward with its dynamic cache.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ascent.models.interface import base_model, call_with_cache, output_cache, prompt_positions

FAST_MODEL_TYPES = frozenset({"llama", "qwen2", "mistral"})


def _rms_norm(weight: Tensor, eps: float, x: Tensor) -> Tensor:
    """The Llama RMSNorm as one fused kernel (statistics in float32 whatever the dtype)."""
    return F.rms_norm(x, weight.shape, weight, eps)


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


class StaticLlamaDecoder:
    """Decode a Llama-family model with a static KV cache and no per-token framework overhead."""

    def __init__(self, packed: PackedLlama) -> None:
        self.w = packed
        self.dtype = packed.embed.dtype
        device = packed.embed.device
        # Each row's cache is read in place in float32 (measured on 2 cores at 128 rows x 64
        # positions: 0.39 ms a layer against 0.77 copying first) but copied out first in
        # bfloat16, where torch sends a strided batch of matrix products to a path 3-4x slower
        # than the copy (measured on AMX). Tried for a bf16 model and slower end to end: a
        # float32 cache read in place (7%: twice the bytes), and a cache grown in chunks of
        # 32 positions and read whole, the unwritten ones masked (2%: its contiguous bf16
        # products of 3 x 64 by 64 x 32k are no faster than the copy and the product).
        self.copy_cache = self.dtype != torch.float32
        d = packed.head_dim
        # rotate_half(x) = cat(-x2, x1) = roll(x, d / 2) * sign: one roll for q and k together
        self.sign = torch.ones(d, dtype=self.dtype, device=device)
        self.sign[: d // 2] = -1

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

    def _qkv(self, layer: PackedLayer, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, ...]:
        """(B, T, heads, d) queries and (B, T, kv_heads, d) keys and values, q and k rotated
        (both at once: they are neighbours in the stacked projection's output)."""
        w = self.w
        b, t, _ = x.shape
        h = _rms_norm(layer.in_norm, w.eps, x)
        qkv = layer.qkv(h).view(b, t, -1, w.head_dim)
        qk, v = qkv[:, :, : w.heads + w.kv_heads], qkv[:, :, w.heads + w.kv_heads :]
        qk = torch.addcmul(qk * cos, qk.roll(w.head_dim // 2, dims=-1), sin)
        return qk[:, :, : w.heads], qk[:, :, w.heads :], v

    def _finish_layer(self, layer: PackedLayer, x: Tensor, attn_out: Tensor) -> Tensor:
        """Output projection, residual, MLP, residual; `attn_out` is (B, T, heads * d)."""
        x = layer.out.plus(attn_out, x)
        h = _rms_norm(layer.post_norm, self.w.eps, x)
        return layer.down.plus(layer.up.times(h, layer.gate.silu(h)), x)

    def _logits(self, x: Tensor) -> Tensor:
        return self.w.head(_rms_norm(self.w.norm, self.w.eps, x))

    def _rotary(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin * sign, (B, T, 1, d), for `_qkv`."""
        cos, sin = self.w.rotary(x, positions)
        return cos.to(x.dtype).unsqueeze(2), (sin.to(x.dtype) * self.sign).unsqueeze(2)

    def prefill(
        self, prompt_ids: Tensor, prompt_mask: Tensor, n: int, max_new_tokens: int
    ) -> Tensor:
        w = self.w
        u, p = prompt_ids.shape
        positions = prompt_positions(prompt_mask)
        x = F.embedding(prompt_ids, w.embed)
        cos, sin = self._rotary(x, positions)
        valid = prompt_mask.bool()
        causal = torch.ones(p, p, dtype=torch.bool, device=x.device).tril()
        # A left-pad query attends to itself only, so it stays finite (its output is unused).
        allowed = (causal & valid[:, None, :]) | torch.eye(p, dtype=torch.bool, device=x.device)
        bias = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device)
        bias = bias.masked_fill(~allowed, float("-inf"))[:, None]
        # Each prompt's keys and values are kept once, for the n rows of its group; each
        # row's own tokens go to a cache preallocated for max_new_tokens.
        shape = (u * n, w.kv_heads, max_new_tokens, w.head_dim)
        self.prompt_keys, self.prompt_values, self.keys, self.values = [], [], [], []
        gqa = w.heads != w.kv_heads
        for layer in w.layers:
            q, k, v = (part.transpose(1, 2) for part in self._qkv(layer, x, cos, sin))
            self.prompt_keys.append(k.transpose(-1, -2).contiguous())  # (U, kv, d, P)
            self.prompt_values.append(v.contiguous())  # (U, kv, P, d)
            self.keys.append(x.new_empty(shape))
            self.values.append(x.new_empty(shape))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)
            x = self._finish_layer(layer, x, out.transpose(1, 2).reshape(u, p, -1))
        pad_bias = torch.zeros(u, p, dtype=torch.float32, device=x.device)
        pad_bias.masked_fill_(~valid, float("-inf"))
        self.prompt_bias = pad_bias.repeat_interleave(n, dim=0)[:, None, None]  # (B, 1, 1, P)
        self.groups, self.n = u, n
        self.rows = torch.arange(u * n, device=x.device)  # each row's place among the u x n
        self.length = 0  # positions generated so far
        self.next_position = positions[:, -1:].repeat_interleave(n, dim=0) + 1
        return self._logits(x[:, -1]).repeat_interleave(n, dim=0)

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

    def _attend(self, i: int, q: Tensor, bias: Tensor) -> Tensor:
        """One new query per row, (B, heads, d), over its prompt and its own tokens so far
        (positions 0..length of the row cache): scores of both parts, one float32 softmax
        over them (`bias`, (B, 1, 1, P + length + 1), masks the prompt's pads), and the two
        weighted sums added. Query head h reads key/value head h // (heads / kv_heads), as
        grouped-query attention does."""
        w = self.w
        b, t = q.shape[0], self.length + 1
        g = w.heads // w.kv_heads
        qg = q.reshape(b, w.kv_heads, g, w.head_dim)
        own_keys, own_values = self.keys[i][:, :, :t], self.values[i][:, :, :t]
        if self.copy_cache:
            own_keys, own_values = own_keys.contiguous(), own_values.contiguous()
        prompt = self._by_group(qg, self.prompt_keys[i])
        own = torch.matmul(qg, own_keys.transpose(-1, -2))
        # bias + scale * scores in one float32 operation (the bias masks the prompts' pads)
        scores = torch.add(bias, torch.cat([prompt, own], dim=-1), alpha=w.head_dim**-0.5)
        probs = torch.softmax(scores, dim=-1).to(q.dtype)
        p = prompt.shape[-1]
        out = self._by_group(probs[..., :p], self.prompt_values[i])
        out = out + torch.matmul(probs[..., p:], own_values)
        return out.reshape(b, 1, w.heads * w.head_dim)

    def step(self, tokens: Tensor) -> Tensor:
        x = F.embedding(tokens[:, None], self.w.embed)
        cos, sin = self._rotary(x, self.next_position)
        t = self.length
        own = self.prompt_bias.new_zeros((len(x), 1, 1, t + 1))
        bias = torch.cat([self.prompt_bias, own], dim=-1)
        for i, layer in enumerate(self.w.layers):
            q, k, v = self._qkv(layer, x, cos, sin)
            self.keys[i][:, :, t] = k[:, 0]
            self.values[i][:, :, t] = v[:, 0]
            x = self._finish_layer(layer, x, self._attend(i, q[:, 0], bias))
        self.length += 1
        self.next_position = self.next_position + 1
        return self._logits(x[:, -1])

    def keep(self, rows: Tensor) -> None:
        """Go on with these rows only (indices into the current rows). The prompts' caches
        stay as they are; each kept row's own cache is copied."""
        t = self.length
        for cache in (self.keys, self.values):
            for i, full in enumerate(cache):
                kept = full.new_empty((len(rows), *full.shape[1:]))
                kept[:, :, :t] = full[rows, :, :t]
                cache[i] = kept
        self.rows = self.rows[rows]
        self.prompt_bias = self.prompt_bias[rows]
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
