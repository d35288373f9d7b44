"""FSDP2 sharding of a causal LM over the run's ranks, and the two ways to read its weights
whole: in place for decoding (`live_module`), or as a stream of tensors (`full_weights`).

`shard_model` applies `fully_shard` to each decoder layer, then to the root (which keeps the
embeddings, the final norm and the LM head together, so tied embeddings stay tied), on a
one-dimensional device mesh over all ranks. Parameters stay float32 (the master weights);
with a bf16 compute dtype FSDP2 gathers them in bf16 for the forward and reduces gradients
in float32 (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=float32)`).

On one process nothing is sharded and both readers are trivial.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from ascent.models.interface import base_model
from ascent.train.distributed import Dist


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of a transformers causal LM (`model.layers` and its kin)."""
    core = base_model(model)
    trunk = getattr(core, getattr(core, "base_model_prefix", "model"), core)
    for name in ("layers", "h", "blocks"):
        blocks = getattr(trunk, name, None)
        if isinstance(blocks, nn.ModuleList):
            return list(blocks)
    raise ValueError(f"cannot find the decoder layers of {type(core).__name__} to shard")


def shard_model(model: nn.Module, dist: Dist, compute_dtype: torch.dtype) -> nn.Module:
    """`model` sharded with FSDP2 over every rank (returned as is on one process)."""
    if not dist.distributed:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(dist.device.type, (dist.world_size,))
    policy = MixedPrecisionPolicy()
    if compute_dtype != torch.float32:
        policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def _fsdp_modules(model: nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def live_module(
    model: nn.Module, compute: contextlib.AbstractContextManager[Any]
) -> Iterator[nn.Module]:
    """`model` with its full weights in place for the duration (a collective on every rank
    when sharded: all ranks enter together); decoding then needs no further collectives,
    so ranks may decode different numbers of tokens."""
    sharded = _fsdp_modules(model) if torch.distributed.is_initialized() else []
    try:
        for m in sharded:
            m.set_reshard_after_forward(False, recurse=False)
            m.unshard()
        with compute:
            yield model
    finally:
        for m in sharded:
            m.reshard()
            # Back to what `shard_model` left: every layer frees its gathered weights after
            # its forward, the root keeps its own (FSDP2's default for a root, which the
            # backward needs at once; resharding it too broke a backward through a value head
            # that runs the root twice).
            m.set_reshard_after_forward(m is not model, recurse=False)


def full_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) of the plain causal LM `model` is (or wraps), one parameter at a time:
    LoRA adapters merged into their base weights (never in place), FSDP shards gathered, tied
    weights under each of their names (an engine may keep its own copy of each, as vLLM's
    CPU build does of lm_head). Every rank must iterate the whole stream when sharded."""
    core = base_model(model)
    lora = _lora_deltas(core)
    for name, param in core.named_parameters(remove_duplicate=False):
        if _is_adapter(name):
            continue
        plain = name.replace(".base_layer.", ".")
        tensor = _full(param.detach())
        if plain in lora:
            tensor = tensor + lora[plain]().to(tensor.dtype)
        yield plain, tensor
    # Buffers are not streamed: in a causal LM they are tables built from the config (rotary
    # frequencies, masks), which every engine builds for itself.


def adapter_weights(model: nn.Module) -> Iterator[tuple[str, Tensor]]:
    """(name, tensor) of the LoRA adapters alone, under the wrapped model's parameter names:
    what an engine holding its own copy of the base weights needs after an update (a few MB
    where the merged weights are the whole model)."""
    for name, param in base_model(model).named_parameters():
        if _is_adapter(name):
            yield name, _full(param.detach())


def _full(tensor: Tensor) -> Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def _is_adapter(name: str) -> bool:
    return ".lora_" in name or ".lora_magnitude_vector" in name


def _lora_deltas(core: nn.Module) -> dict[str, Any]:
    """Base-weight name -> a function computing its LoRA delta (peft modules only)."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return {}
    deltas = {}
    for name, module in core.named_modules():
        if isinstance(module, LoraLayer):
            adapters = [a for a in module.active_adapters if a in module.lora_A]
            deltas[f"{name}.weight"] = lambda m=module, a=adapters: sum(
                _full(m.get_delta_weight(x)) for x in a
            )
    return deltas
