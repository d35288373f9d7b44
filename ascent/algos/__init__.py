"""The algorithm core: pure functions over tensors, selected by name through registries.

Nothing here reads files, config objects or globals; the trainer builds the typed inputs
(`AdvantageBatch`, `PolicyLossInput`, ...) and looks the parts up by the names in the config:

- `ADVANTAGES`: gae, length_adaptive_gae, grpo, dr_grpo, rloo, reinforce_pp,
  reinforce_pp_baseline, turn_grpo, turn_dr_grpo (agentic episodes) -> `fn(batch, params)`
- `POLICY_LOSSES`: ppo_clip, gspo, cispo, sapo            -> `fn(inp, params)`
- `AGGREGATIONS`: token_mean, seq_mean_token_mean, seq_mean_token_sum,
  seq_mean_token_sum_norm                                 -> `fn(loss, mask, scale)`
- `KL_ESTIMATORS`: k1, k2, k3                             -> `fn(logp, ref_logp)`

and the terms a recipe adds: `positive_nll` (VAPO), `soft_overlong_penalty` (DAPO).
"""

from ascent.algos import agentic as _agentic  # noqa: F401  (registers the turn estimators)
from ascent.algos.advantages import ADVANTAGES, length_adaptive_lambda
from ascent.algos.aggregation import AGGREGATIONS
from ascent.algos.auxiliary import positive_nll
from ascent.algos.batch import (
    AdvantageBatch,
    AdvantageParams,
    AdvantageResult,
    AggregationScale,
    PolicyLossInput,
    PolicyLossParams,
    Turns,
)
from ascent.algos.distributions import (
    entropy_by_rows,
    entropy_from_logits,
    logprobs_from_logits,
)
from ascent.algos.kl import KL_ESTIMATORS, kl_penalty_rewards
from ascent.algos.masked import masked_mean, masked_sum, masked_var, masked_whiten
from ascent.algos.policy_loss import POLICY_LOSSES
from ascent.algos.shaping import soft_overlong_penalty
from ascent.algos.value import explained_variance, value_loss

__all__ = [
    "ADVANTAGES",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "AdvantageBatch",
    "AdvantageParams",
    "AdvantageResult",
    "AggregationScale",
    "PolicyLossInput",
    "PolicyLossParams",
    "Turns",
    "entropy_by_rows",
    "entropy_from_logits",
    "explained_variance",
    "kl_penalty_rewards",
    "length_adaptive_lambda",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "positive_nll",
    "soft_overlong_penalty",
    "value_loss",
]
