"""The value model V(s_t) of PPO-style LLM training: a transformer trunk and a linear head.

`ValueModel` wraps the trunk of a causal LM (its `base_model_prefix` module: `model` for
Llama/Qwen) and puts `head: hidden -> 1` where the LM head was. Its output carries the values
in the `logits` slot, shape (B, T, 1), so `ascent.train.forward` runs it exactly like a
policy (shared-prompt KV cache included). Two ways to get one:

- `separate_critic`: its own trunk, loaded from a checkpoint (by default the policy's initial
  weights; VAPO initialises from a reward model), trained by its own optimiser.
- `value_head`: a head on the policy's own trunk (shared weights, half the memory); the value
  loss then also shapes the policy's representation. `train_trunk = False` stops that (the
  trunk runs without gradients), which critic warm-up uses so the policy stays frozen.

The head starts at zero, so every initial value is 0.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ascent.models.interface import base_model, output_cache


def trunk_of(causal_lm: nn.Module) -> nn.Module:
    """The transformer under a causal LM's head (unwrapping peft first)."""
    core = base_model(causal_lm)
    return getattr(core, core.base_model_prefix)


@dataclass
class ValueOutput:
    logits: Tensor  # (B, T, 1) V(s_t): in the logits slot, so forward.py treats it like a policy
    cache: object | None = None  # the trunk's KV cache when use_cache is set


class ValueModel(nn.Module):
    """V(s_t) at every position: `head(trunk(...).last_hidden_state)`."""

    def __init__(self, trunk: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.train_trunk = True

    def get_base_model(self) -> nn.Module:
        """The transformers model inside (how `interface.base_model` unwraps wrappers)."""
        return self.trunk

    def forward(self, **kwargs: object) -> ValueOutput:
        with nullcontext() if self.train_trunk else torch.no_grad():
            out = self.trunk(**kwargs)
        hidden = out.last_hidden_state.to(self.head.weight.dtype)
        cache = output_cache(out) if kwargs.get("use_cache") else None
        return ValueOutput(logits=self.head(hidden), cache=cache)


def value_head(policy: nn.Module) -> ValueModel:
    """A value head on the policy's own trunk (the trunk's parameters are shared)."""
    trunk = trunk_of(policy)
    device = next(trunk.parameters()).device
    return ValueModel(trunk, trunk.config.hidden_size).to(device)


def separate_critic(causal_lm: nn.Module) -> ValueModel:
    """A critic with its own trunk: `causal_lm`'s, its LM head dropped."""
    trunk = trunk_of(causal_lm)
    device = next(trunk.parameters()).device
    critic = ValueModel(trunk, trunk.config.hidden_size).to(device)
    critic.train()
    return critic
