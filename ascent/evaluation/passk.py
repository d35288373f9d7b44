"""Unbiased pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code",
https://arxiv.org/abs/2107.03374, section 2.1).

With n samples of a problem of which c are correct, the chance that k of them drawn without
replacement include a correct one is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i)

The product form avoids the huge binomials (and their overflow in floating point) and is
exact to rounding. The score of a problem set is the mean over its problems.
"""

from __future__ import annotations

from collections.abc import Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that k of n samples (c of them correct) include a correct one."""
    if not 0 <= c <= n:
        raise ValueError(f"correct samples c={c} must be between 0 and n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"k={k} must be between 1 and the number of samples n={n}")
    if n - c < k:  # every draw of k samples contains a correct one
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float | None:
    """Mean pass@k over problems given as (n, c); None for an empty set."""
    if not counts:
        return None
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
