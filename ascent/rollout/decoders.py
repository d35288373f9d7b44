"""Incremental decoders behind the transformers engine: prefill once, then one token per step.

Both share the engine's contract: `prefill(prompt_ids, prompt_mask, n, max_new_tokens)` runs
each distinct prompt once and returns next-token logits for its `n` copies; `step(tokens)`
appends one token per row and returns the next logits.

- `StaticLlamaDecoder`, the fast path for Llama-family models (Llama, Qwen2, Mistral, all
  without a sliding window; LoRA adapters included): a plain function of the model's own
  weights (read, never copied, so it always decodes with the weights being trained) over a
  key/value cache preallocated for the whole generation, with no per-step mask building,
  cache objects or output dataclasses.
- `CacheDecoder`, for any other causal LM: the model's own forward with its dynamic cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ascent.models.interface import base_model, call_with_cache, output_cache, prompt_positions

FAST_MODEL_TYPES = frozenset({"llama", "qwen2", "mistral"})


def _rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return x * cos + _rotate_half(x) * sin


def _rms_norm(norm: nn.Module, x: Tensor) -> Tensor:
    """The Llama RMSNorm (statistics in float32, scale applied in the input dtype)."""
    if x.dtype == torch.float32:  # the same arithmetic, one fused kernel
        return F.rms_norm(x, norm.weight.shape, norm.weight, norm.variance_epsilon)
    x32 = x.float()
    normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * normed.to(x.dtype)


def _lora_only(model: nn.Module) -> bool:
    """A peft model whose every adapter is LoRA (prompt or prefix tuning change the inputs,
    which this decoder would not reproduce)."""
    configs = getattr(model, "peft_config", None) or {}
    return bool(configs) and all(c.peft_type == "LORA" for c in configs.values())


class StaticLlamaDecoder:
    """Decode a Llama-family model with a static KV cache and no per-token framework overhead."""

    def __init__(self, model: nn.Module) -> None:
        self.model = base_model(model)  # under LoRA: the model whose layers carry adapters
        self.core = self.model.model
        cfg = model.config
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads

    @staticmethod
    def supports(model: nn.Module) -> bool:
        """A Llama-family model whose every piece this decoder reproduces, plain or with LoRA
        adapters (they live inside its linear layers, which the decoder calls as modules)."""
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

    def _attention(
        self, layer: nn.Module, x: Tensor, cos: Tensor, sin: Tensor
    ) -> tuple[Tensor, ...]:
        attn = layer.self_attn
        b, t, _ = x.shape
        h = _rms_norm(layer.input_layernorm, x)
        q = attn.q_proj(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = attn.k_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = attn.v_proj(h).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        return _rope(q, cos, sin), _rope(k, cos, sin), v

    def _finish_layer(self, layer: nn.Module, x: Tensor, attn_out: Tensor) -> Tensor:
        b, t = x.shape[:2]
        x = x + layer.self_attn.o_proj(attn_out.transpose(1, 2).reshape(b, t, -1))
        mlp = layer.mlp
        h = _rms_norm(layer.post_attention_layernorm, x)
        return x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))

    def _logits(self, x: Tensor) -> Tensor:
        return self.model.lm_head(_rms_norm(self.core.norm, x))

    def prefill(
        self, prompt_ids: Tensor, prompt_mask: Tensor, n: int, max_new_tokens: int
    ) -> Tensor:
        u, p = prompt_ids.shape
        total = p + max_new_tokens
        positions = prompt_positions(prompt_mask)
        x = self.core.embed_tokens(prompt_ids)
        cos, sin = (c.unsqueeze(1) for c in self.core.rotary_emb(x, positions))
        valid = prompt_mask.bool()
        causal = torch.ones(p, p, dtype=torch.bool, device=x.device).tril()
        # A left-pad query attends to itself only, so it stays finite (its output is unused).
        allowed = (causal & valid[:, None, :]) | torch.eye(p, dtype=torch.bool, device=x.device)
        bias = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device)
        bias = bias.masked_fill(~allowed, float("-inf"))[:, None]
        shape = (u * n, self.kv_heads, total, self.head_dim)
        self.keys, self.values = [], []
        gqa = self.heads != self.kv_heads
        for layer in self.core.layers:
            q, k, v = self._attention(layer, x, cos, sin)
            self.keys.append(x.new_empty(shape))
            self.values.append(x.new_empty(shape))
            self.keys[-1][:, :, :p] = k.repeat_interleave(n, dim=0)
            self.values[-1][:, :, :p] = v.repeat_interleave(n, dim=0)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)
            x = self._finish_layer(layer, x, out)
        key_bias = torch.zeros(u * n, 1, 1, total, dtype=x.dtype, device=x.device)
        key_bias[:, 0, 0, :p].masked_fill_(~valid.repeat_interleave(n, dim=0), float("-inf"))
        self.key_bias = key_bias
        self.length = p
        self.next_position = positions[:, -1:].repeat_interleave(n, dim=0) + 1
        return self._logits(x[:, -1]).repeat_interleave(n, dim=0)

    def step(self, tokens: Tensor) -> Tensor:
        x = self.core.embed_tokens(tokens[:, None])
        cos, sin = (c.unsqueeze(1) for c in self.core.rotary_emb(x, self.next_position))
        t = self.length
        bias = self.key_bias[..., : t + 1]
        gqa = self.heads != self.kv_heads
        for i, layer in enumerate(self.core.layers):
            q, k, v = self._attention(layer, x, cos, sin)
            self.keys[i][:, :, t : t + 1] = k
            self.values[i][:, :, t : t + 1] = v
            keys, values = self.keys[i][:, :, : t + 1], self.values[i][:, :, : t + 1]
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=bias, enable_gqa=gqa)
            x = self._finish_layer(layer, x, out)
        self.length += 1
        self.next_position = self.next_position + 1
        return self._logits(x[:, -1])


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
