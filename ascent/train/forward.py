"""Teacher-forced log-probabilities (and critic values) of responses: the forward passes the
trainer differentiates.

The completions of one prompt share its tokens, so the prompt is run once per distinct prompt
and its key/value cache is gathered out to every row that continues it; only the response
positions are run per row. With a group of 8 completions this removes most of the prompt's
compute from both the forward and the backward pass. Gradients flow through the gathered
cache, so the result, and its gradient, equal a plain forward over prompt + response.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ascent.algos import entropy_by_rows, entropy_from_logits, logprobs_from_logits
from ascent.models.fused_head import head_logprobs
from ascent.models.interface import (
    base_model,
    call_with_cache,
    checkpointing,
    output_cache,
    prompt_positions,
)
from ascent.rollout.batch import RolloutBatch


def _shared_prefix_logits(model: nn.Module, batch: RolloutBatch) -> Tensor | None:
    """(B, R, V) logits at the response positions, running each distinct prompt once (for a
    trunk: (B, R, H) hidden states)."""
    b, p = batch.prompt_ids.shape
    r = batch.response_ids.shape[1]
    keyed = torch.cat([batch.prompt_ids, batch.prompt_mask.long()], dim=-1)
    unique, inverse = torch.unique(keyed, dim=0, return_inverse=True)
    if p < 2 or unique.shape[0] == b or checkpointing(model) or _sharded(model):
        return None
    u_ids, u_mask = unique[:, : p - 1], unique[:, p : 2 * p - 1]
    prefix = model(
        input_ids=u_ids,
        attention_mask=u_mask,
        position_ids=prompt_positions(u_mask),
        use_cache=True,
    )
    past = output_cache(prefix)
    past.batch_select_indices(inverse)  # differentiable gather: gradients reach the prompt
    suffix = torch.cat([batch.prompt_ids[:, -1:], batch.response_ids[:, :-1]], dim=-1)
    start = batch.prompt_mask.long().sum(-1, keepdim=True) - 1
    mask = torch.cat([batch.prompt_mask.long(), batch.prompt_mask.new_ones(b, r - 1)], dim=-1)
    out = call_with_cache(
        model,
        past,
        input_ids=suffix,
        attention_mask=mask,
        position_ids=start + torch.arange(r, device=start.device),
        use_cache=True,
    )
    return _main_output(out)


def _main_output(out: object) -> Tensor:
    """Logits of a causal LM, values of a ValueModel, hidden states of a trunk."""
    logits = getattr(out, "logits", None)
    return logits if logits is not None else out.last_hidden_state


def _sharded(model: nn.Module) -> bool:
    """FSDP2 frees a layer's gathered weights after each forward and gathers them again for
    the backward of the last one only, so one module may not run twice in a graph."""
    from torch.distributed.fsdp import FSDPModule

    # A value head on a sharded policy is no FSDP module itself: its trunk's layers are.
    return any(isinstance(m, FSDPModule) for m in model.modules())


def _full_logits(model: nn.Module, batch: RolloutBatch) -> Tensor:
    p = batch.prompt_ids.shape[1]
    ids = torch.cat([batch.prompt_ids, batch.response_ids], dim=-1)
    mask = torch.cat([batch.prompt_mask.long(), torch.ones_like(batch.response_ids)], dim=-1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=prompt_positions(mask))
    return _main_output(out)[:, p - 1 : -1]


def _response_outputs(model: nn.Module, batch: RolloutBatch) -> Tensor:
    """The model's output (logits, or values of a `ValueModel`) at each response position."""
    out = _shared_prefix_logits(model, batch)
    return _full_logits(model, batch) if out is None else out


def response_values(critic: nn.Module, batch: RolloutBatch) -> Tensor:
    """V(s_t) at every response position: the value of the state whose next token is
    response token t (prompt + response[:t]), from a `ValueModel`.

    Returns:
        (B, R) float32; padding positions hold values that the masks exclude.
    """
    return _response_outputs(critic, batch).squeeze(-1).float()


def response_logprobs(
    model: nn.Module, batch: RolloutBatch, temperature: float = 1.0, *, entropy: str = "none"
) -> tuple[Tensor, Tensor | None]:
    """log pi(a_t | prompt, a_<t) at every response position, and optionally the entropy.

    Args:
        model: a transformers causal LM (optionally peft-wrapped).
        batch: prompt and response tokens; the masks say which positions count.
        temperature: logits are divided by it (after the upcast to float32, as when
            sampling), so the result refers to the same policy as the engine's log-probs.
        entropy: "none"; "loss": differentiable, for a loss term; "metric": without
            gradients, one row at a time (the full-vocabulary softmax is the costliest
            tensor of a step, so it is only kept whole when a loss needs it).

    Returns:
        logprobs (B, R) float32, and entropy (B, R) float32 or None; padding positions hold
        values that the masks exclude.
    """
    head = _plain_head(model) if entropy != "loss" else None
    if head is not None:
        return _fused_logprobs(model, head, batch, temperature, entropy == "metric")
    logits = _response_outputs(model, batch)
    logp = logprobs_from_logits(logits, batch.response_ids, temperature)
    if entropy == "loss":
        return logp, entropy_from_logits(logits.float() / temperature)
    if entropy == "metric":
        return logp, entropy_by_rows(logits, temperature)
    return logp, None


FUSED_HEAD_TYPES = frozenset({"llama", "qwen2", "qwen3", "mistral"})


def _plain_head(model: nn.Module) -> nn.Linear | None:
    """The LM head, when logits are exactly lm_head(trunk(x)) and the trunk can be run on its
    own (a plain or LoRA-wrapped Llama-family model, unsharded); else None."""
    inner = base_model(model)
    head, trunk = getattr(inner, "lm_head", None), getattr(inner, "model", None)
    if type(head) is not nn.Linear or trunk is None or _sharded(model):
        return None
    return head if inner.config.model_type in FUSED_HEAD_TYPES else None


def _fused_logprobs(
    model: nn.Module, head: nn.Linear, batch: RolloutBatch, temperature: float, entropy: bool
) -> tuple[Tensor, Tensor | None]:
    """The trunk's hidden states at the response positions, then the LM head and the
    log-softmax chunk by chunk over the masked positions only (fused_head.py)."""
    hidden = _response_outputs(base_model(model).model, batch)
    picked = batch.response_mask.bool()
    logp, ent = head_logprobs(
        hidden[picked], head.weight, head.bias, batch.response_ids[picked], temperature,
        with_entropy=entropy,
    )  # fmt: skip
    out = torch.zeros(picked.shape, dtype=torch.float32, device=hidden.device)
    logp_full = out.masked_scatter(picked, logp)
    if not entropy:
        return logp_full, None
    return logp_full, out.masked_scatter(picked, ent)
