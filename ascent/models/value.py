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
  When the policy is sharded over ranks (FSDP2), its root module gathers the embeddings and
  the final norm in its own forward hooks, which a call to the trunk alone would skip; the
  head then runs the whole policy (`through_policy`: its LM head on one position a row, a
  negligible cost) and reads the trunk's output on the way.

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

    def __init__(self, trunk: nn.Module, hidden_size: int, policy: nn.Module | None = None) -> None:
        super().__init__()
        self.trunk = trunk
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.train_trunk = True
        # The policy whose forward runs the trunk (see the module's docstring); kept out of
        # the submodules, whose parameters are the head's and the trunk's.
        self._policy = (policy,)

    def get_base_model(self) -> nn.Module:
        """The transformers model inside (how `interface.base_model` unwraps wrappers)."""
        return self.trunk

    def forward(self, **kwargs: object) -> ValueOutput:
        with nullcontext() if self.train_trunk else torch.no_grad():
            out, cached = self._trunk_output(kwargs)
        hidden = out.last_hidden_state.to(self.head.weight.dtype)
        cache = output_cache(cached) if kwargs.get("use_cache") else None
        return ValueOutput(logits=self.head(hidden), cache=cache)

    def _trunk_output(self, kwargs: dict[str, object]) -> tuple[object, object]:
        """The trunk's output, and the output holding the KV cache."""
        policy = self._policy[0]
        if policy is None:
            out = self.trunk(**kwargs)
            return out, out
        seen: list[object] = []
        hook = self.trunk.register_forward_hook(lambda _m, _a, output: seen.append(output))
        try:
            whole = policy(**kwargs, logits_to_keep=1)
        finally:
            hook.remove()
        return seen[-1], whole


def value_head(policy: nn.Module, *, through_policy: bool = False) -> ValueModel:
    """A value head on the policy's own trunk (the trunk's parameters are shared);
    `through_policy` for a policy that will be sharded over ranks."""
    trunk = trunk_of(policy)
    device = next(trunk.parameters()).device
    owner = policy if through_policy else None
    return ValueModel(trunk, trunk.config.hidden_size, owner).to(device)


def separate_critic(causal_lm: nn.Module) -> ValueModel:
    """A critic with its own trunk: `causal_lm`'s, its LM head dropped."""
    trunk = trunk_of(causal_lm)
    device = next(trunk.parameters()).device
    critic = ValueModel(trunk, trunk.config.hidden_size).to(device)
    critic.train()
    return critic
