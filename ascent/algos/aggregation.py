"""Loss aggregation: how a (B, T) per-token loss becomes the scalar that is back-propagated.

The choice changes the gradient, not just its scale: `token_mean` weights every token
equally (long responses count more), `seq_mean_token_mean` weights every sequence equally
(a token of a short response counts more, the length bias Dr. GRPO criticises), and the
`token_sum` modes weight by a constant.

Every mode divides by counts of the WHOLE batch (`AggregationScale`), never of the
micro-batch at hand. The numerator is a plain sum over rows and tokens, so it splits over
micro-batches, and therefore summing (or gradient-accumulating) the aggregated losses of any
micro-batch split gives exactly the aggregated loss of the whole batch. Averaging
per-micro-batch means instead would re-weight tokens by how the batch happened to be cut
(a micro-batch of short responses would weigh as much as one of long ones). For data
parallelism, pass counts summed over all ranks and sum the gradients (multiply by the world
size if the framework averages them).
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from ascent.algos.batch import AggregationScale
from ascent.algos.masked import masked_sum
from ascent.registry import Registry

Aggregation = Callable[[Tensor, Tensor, AggregationScale], Tensor]
AGGREGATIONS: Registry[Aggregation] = Registry("loss aggregation")


@AGGREGATIONS.register("token_mean")
def token_mean(loss: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """sum(loss * mask) / global_tokens: every token of the batch weighs the same.

    DAPO's token-level loss (Yu et al. 2025, https://arxiv.org/abs/2503.14476), used by
    VAPO: long reasoning chains get their fair share of the gradient.

    Args:
        loss: (B, T) per-token loss.
        mask: (B, T) 1 on policy tokens.
        scale: global_tokens of the whole batch.
    """
    return masked_sum(loss, mask) / scale.global_tokens


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(loss: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """sum_i [sum_t loss_it / len_i] / global_seqs: every sequence weighs the same.

    The original GRPO objective (Shao et al. 2024, https://arxiv.org/abs/2402.03300), with
    1/|o_i| inside the sum over completions. A row with no masked token contributes 0 (its
    length is floored at 1 to avoid 0/0).

    Args:
        loss: (B, T) per-token loss.
        mask: (B, T) 1 on policy tokens.
        scale: global_seqs of the whole batch.
    """
    lengths = mask.bool().sum(-1).clamp(min=1).to(loss.dtype)
    return (masked_sum(loss, mask, dim=-1) / lengths).sum() / scale.global_seqs


@AGGREGATIONS.register("seq_mean_token_sum")
def seq_mean_token_sum(loss: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """sum(loss * mask) / global_seqs: per-sequence token sums, averaged over sequences.

    Args:
        loss: (B, T) per-token loss.
        mask: (B, T) 1 on policy tokens.
        scale: global_seqs of the whole batch.
    """
    return masked_sum(loss, mask) / scale.global_seqs


@AGGREGATIONS.register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(loss: Tensor, mask: Tensor, scale: AggregationScale) -> Tensor:
    """sum(loss * mask) / (global_seqs * norm_const): Dr. GRPO's length-unbiased loss.

    Liu et al. 2025, https://arxiv.org/abs/2503.20783: dividing by each response's own
    length rewards long wrong answers (their per-token penalty shrinks); a constant such as
    max_new_tokens keeps every token's weight independent of its response's length.

    Args:
        loss: (B, T) per-token loss.
        mask: (B, T) 1 on policy tokens.
        scale: global_seqs of the whole batch and norm_const.
    """
    return masked_sum(loss, mask) / (scale.global_seqs * scale.norm_const)
