"""How ascent calls a transformers model, across versions and wrappers.

transformers 5 renamed the KV-cache argument and output (`past_key_values` -> `cache`); peft
wraps the model; left-padded prompts need explicit position ids. These helpers keep those
details out of the decoders and the training forward.
"""

from __future__ import annotations

import inspect
from functools import cache as memoize

from torch import Tensor, nn


@memoize
def _cache_kwarg(model_cls: type) -> str:
    """transformers >= 5.x names the KV-cache argument `cache`; older versions `past_key_values`."""
    params = inspect.signature(model_cls.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def base_model(model: nn.Module) -> nn.Module:
    """The transformers model under an optional wrapper (peft, or ascent's `ValueModel`)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def call_with_cache(model: nn.Module, past: object, **kwargs: object) -> object:
    """`model(**kwargs)` with `past` as its KV cache, whatever this transformers calls it."""
    return model(**kwargs, **{_cache_kwarg(type(base_model(model))): past})


def output_cache(output: object) -> object:
    past = getattr(output, "cache", None)
    return past if past is not None else output.past_key_values


def prompt_positions(mask: Tensor) -> Tensor:
    """Position ids of left-padded prompts: 0 at each row's first real token."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def checkpointing(model: nn.Module) -> bool:
    """Whether activation (gradient) checkpointing is on (transformers 5 renamed the flag)."""
    core = base_model(model)
    for flag in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(core), flag):
            return bool(getattr(core, flag))
    return False
