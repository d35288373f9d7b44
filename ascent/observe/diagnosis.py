"""Recognise the failure patterns practitioners report, and say which fix to try first.

Each rule reads the metric history of a run (the rows of metrics.jsonl, oldest first) and
returns at most one `Finding`. The rules look at windows, not single steps, because RL
metrics are noisy: one high-KL step is weather, twenty are climate. Thresholds are the
ones the write-ups quote (e.g. KL past 1.0); they are arguments, so a test or a user can
tighten them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Finding:
    code: str  # stable identifier, e.g. "kl_high"
    step: int  # the step at which the pattern was established
    message: str  # what is happening, with the numbers
    fix: str  # the first thing to try

    def __str__(self) -> str:
        return f"step {self.step}: {self.message} -> {self.fix}"


def _series(rows: Sequence[Row], key: str) -> list[tuple[int, float]]:
    out = []
    for row in rows:
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append((int(row.get("step", len(out))), float(value)))
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def nan_loss(rows: Sequence[Row]) -> Finding | None:
    for row in reversed(rows):  # the latest occurrence
        if "loss" in row and (row["loss"] is None or not math.isfinite(float(row["loss"]))):
            return Finding(
                "nan_loss",
                int(row.get("step", 0)),
                "the loss is NaN/inf",
                "lower optim.lr, keep train.max_grad_norm set, and try float32 compute "
                "(model.dtype); then resume from the last good checkpoint",
            )
    return None


def kl_high(rows: Sequence[Row], limit: float = 1.0, window: int = 5) -> Finding | None:
    kl = _series(rows, "kl")
    for i in range(len(kl), window - 1, -1):  # the latest such window
        recent = [v for _, v in kl[i - window : i]]
        if min(recent) > limit:
            return Finding(
                "kl_high",
                kl[i - 1][0],
                f"KL to the reference stayed above {limit} for {window} steps "
                f"(now {recent[-1]:.3g}): the policy is drifting away",
                "raise algorithm.kl_coef or lower optim.lr",
            )
    return None


def kl_zero(rows: Sequence[Row], window: int = 20, floor: float = 1e-6) -> Finding | None:
    kl = _series(rows, "kl")
    if len(kl) < window + 5:
        return None
    recent = [v for _, v in kl[-window:]]
    if max(abs(v) for v in recent) < floor:
        return Finding(
            "kl_zero",
            kl[-1][0],
            f"KL to the reference has stayed below {floor:g} for {window} steps: the policy "
            "is not moving",
            "optim.lr is probably too low (or the loss has no signal: check reward_std)",
        )
    return None


def saturation(rows: Sequence[Row], window: int = 10, frac: float = 0.9) -> Finding | None:
    zero = _series(rows, "frac_reward_zero_std")
    if len(zero) < window:
        return None
    recent = [v for _, v in zero[-window:]]
    if _mean(recent) >= frac:
        return Finding(
            "saturation",
            zero[-1][0],
            f"{_mean(recent):.0%} of groups had identical rewards over the last {window} "
            "steps, so advantages are ~0 and the reward is flat",
            "enable history resampling or dynamic sampling, or use harder problems "
            "(see examples/srpo.toml, examples/dapo.toml)",
        )
    return None


def reward_at_floor(rows: Sequence[Row], window: int = 10) -> Finding | None:
    reward = _series(rows, "reward")
    if len(reward) < window:
        return None
    recent = [v for _, v in reward[-window:]]
    floor = min(v for _, v in reward)
    if max(recent) == min(recent) == floor:
        return Finding(
            "reward_at_floor",
            reward[-1][0],
            f"every completion of the last {window} steps got the same, lowest reward ({floor:g})",
            "check answer extraction (reward.math answer pattern vs. what the model writes), "
            "truncation (rollout.max_new_tokens) and the prompt format; read samples/",
        )
    return None


def length_collapse(rows: Sequence[Row], window: int = 10, ratio: float = 0.3) -> Finding | None:
    length = _series(rows, "completions/mean_length")
    if len(length) < 2 * window:
        return None
    early = _mean([v for _, v in length[:window]])
    late = _mean([v for _, v in length[-window:]])
    if early > 0 and late < ratio * early:
        return Finding(
            "length_collapse",
            length[-1][0],
            f"mean response length fell from {early:.1f} to {late:.1f} tokens",
            "check for a length penalty or a reward that favours empty answers; try "
            'loss_agg = "token_mean" and a lower optim.lr',
        )
    return None


def _slope(points: Sequence[tuple[int, float]]) -> float:
    mx = _mean([s for s, _ in points])
    my = _mean([v for _, v in points])
    var = sum((s - mx) ** 2 for s, _ in points)
    return sum((s - mx) * (v - my) for s, v in points) / var if var else 0.0


def reward_hacking(rows: Sequence[Row], window: int = 20, flat: float = 1e-3) -> Finding | None:
    imm = _series(rows, "reward/immediate")[-window:]
    dly = _series(rows, "reward/delayed")[-window:]
    if len(imm) < window or len(dly) < window:
        return None
    if _slope(imm) > 5 * flat and _slope(dly) <= flat:
        return Finding(
            "reward_hacking",
            imm[-1][0],
            "the immediate (per-turn) reward is rising while the delayed (episode) reward is "
            "flat or falling: the policy may be gaming the shaped reward",
            "lower agentic immediate_reward_weight (e.g. 0.3 -> 0.1)",
        )
    return None


def entropy_collapse(
    rows: Sequence[Row], window: int = 10, floor: float = 0.05, ratio: float = 0.1
) -> Finding | None:
    """LLM runs: the next-token entropy fell to almost nothing while reward has not peaked."""
    entropy = _series(rows, "entropy")
    if len(entropy) < 2 * window:
        return None
    early = _mean([v for _, v in entropy[:window]])
    late = _mean([v for _, v in entropy[-window:]])
    if late < floor and late < ratio * early:
        return Finding(
            "entropy_collapse",
            entropy[-1][0],
            f"next-token entropy collapsed from {early:.3f} to {late:.3f} nats: the policy "
            "has become nearly deterministic and stops exploring",
            "raise rollout.temperature, use clip-higher (algorithm.clip_high = 0.28 with "
            "several mini-batches), or add algorithm.entropy_coef; lower optim.lr",
        )
    return None


def classic_entropy_low(
    rows: Sequence[Row], window: int = 5, floor: float = 0.01
) -> Finding | None:
    """Classic PPO (the actor-critic write-up): policy entropy below 0.01."""
    entropy = _series(rows, "policy/entropy")
    if len(entropy) < window:
        return None
    recent = [v for _, v in entropy[-window:]]
    if max(recent) < floor:
        return Finding(
            "entropy_low",
            entropy[-1][0],
            f"policy entropy has stayed below {floor} for {window} updates: the agent no "
            "longer explores and may be stuck in a poor policy",
            "raise train.entropy_coef (e.g. 0.01 -> 0.02) or lower optim.lr_actor",
        )
    return None


def loss_oscillating(rows: Sequence[Row], window: int = 12, flips: float = 0.75) -> Finding | None:
    """Classic PPO: the policy loss swings sign update after update with a large amplitude."""
    loss = [v for _, v in _series(rows, "loss/policy")[-window:]]
    if len(loss) < window:
        return None
    changes = sum((a > 0) != (b > 0) for a, b in pairwise(loss))
    spread = max(loss) - min(loss)
    scale = _mean([abs(v) for v in loss])
    if changes >= flips * (window - 1) and scale > 0 and spread >= 1.5 * scale:
        return Finding(
            "loss_oscillating",
            int(_series(rows, "loss/policy")[-1][0]),
            f"the policy loss changed sign {changes} times in {window} updates (spread "
            f"{spread:.3g}): the updates overshoot",
            "lower optim.lr_actor or train.clip_range, or raise train.batch_size",
        )
    return None


def _rolling(points: Sequence[tuple[int, float]], window: int) -> list[tuple[int, float]]:
    """(step, mean of the `window` values ending there) for every full window."""
    return [
        (points[i][0], _mean([v for _, v in points[i - window + 1 : i + 1]]))
        for i in range(window - 1, len(points))
    ]


def _step_noise(values: Sequence[float]) -> float:
    """The per-step noise of a series, from its successive differences (a trend barely
    moves them): std(x[t+1] - x[t]) / sqrt(2)."""
    diffs = [b - a for a, b in pairwise(values)]
    return statistics.stdev(diffs) / math.sqrt(2) if len(diffs) >= 2 else 0.0


def reward_spike_collapse(
    rows: Sequence[Row],
    window: int = 10,
    gain: float = 0.2,
    kept: float = 0.2,
    noise_sigmas: float = 4.0,
    resolution: float = 0.1,
) -> Finding | None:
    """The reward rose, then fell back: the smoothed reward climbed at least `gain` above
    where it started (the mean of the first third of the rows seen), and the latest window
    keeps under `kept` of that climb. A spike then a collapse is what an update too large for
    the policy looks like (the write-ups' lr and KL advice); the best checkpoint, kept by
    validation reward, is from before it.

    Noise must not pass for a spike: the highest of many noisy window means sits above the
    start by chance alone (the demo's per-step noise of 0.15 made climbs of 0.12-0.2 while
    its reward rose steadily, and the warning fired 88 times in one run). So the window
    widens until its mean's standard error is at most resolution / noise_sigmas, and the
    climb must reach noise_sigmas of those standard errors. It must also reach `gain`, 0.2:
    runs that learnt well (examples/openenv_tiny.toml, three seeds, +33 to +39 points) had
    bursts of 0.10-0.15 over ten steps and back, from batches that happened to go well, and
    with a bar of 0.1 one of them warned 17 times; the collapses this rule is for give back
    more."""
    reward = _series(rows, "reward")
    values = [v for _, v in reward]
    sigma = _step_noise(values)
    width = max(window, math.ceil((noise_sigmas * sigma / resolution) ** 2))
    if len(values) < 3 * width:
        return None
    smooth = _rolling(reward, width)
    start = _mean(values[: len(values) // 3])
    peak_step, peak = max(smooth, key=lambda p: p[1])
    last_step, last = smooth[-1]
    climb = peak - start
    noise = noise_sigmas * sigma / math.sqrt(width)
    if climb >= max(gain, noise) and last_step - peak_step >= width and last - start < kept * climb:
        fallen = last_step  # established: the step since which it has stayed fallen
        for step, value in reversed(smooth):
            if step <= peak_step or value - start >= kept * climb:
                break
            fallen = step
        return Finding(
            "reward_spike_collapse",
            fallen,
            f"the reward rose from {start:.3f} to {peak:.3f} (step {peak_step}) and fell back to "
            f"{last:.3f}",
            "lower optim.lr (halve it), raise algorithm.kl_coef to anchor the policy, and resume "
            "from the best checkpoint (checkpoints/best.json: kept by validation reward)",
        )
    return None


# The SRPO write-up reads a rising rate of reflection words ("wait", "recheck", ...) as the
# policy learning to check its own work, and shows it rising within the first few hundred
# steps. The step its text names is not in the transcription this project has, so ascent uses
# 200; the rule is an argument like every other threshold.
REFLECTION_BY_STEP = 200
REASONING_LENGTH = 64  # tokens: shorter completions have no room to reflect in, so no rule


def reflection_flat(
    rows: Sequence[Row],
    by_step: int = REFLECTION_BY_STEP,
    window: int = 10,
    rise: float = 0.02,
) -> Finding | None:
    """By `by_step`, the smoothed reflection/rate has not risen `rise` above where it began,
    in a run whose completions are long enough to reason in. Accuracy may still rise (then
    nothing is wrong); when it does not either, the policy is not learning to reason."""
    rate = _rolling(_series(rows, "reflection/rate"), window)
    lengths = [v for _, v in _series(rows, "completions/mean_length")]
    if not rate or rate[-1][0] < by_step or _mean(lengths[-window:]) < REASONING_LENGTH:
        return None
    start, (last_step, last) = rate[0][1], rate[-1]
    if last - start >= rise:
        return None
    return Finding(
        "reflection_flat",
        last_step,
        f"the reflection rate has not risen by step {last_step} ({start:.1%} -> {last:.1%} of "
        "completions with a reflection word)",
        "if held-out accuracy is rising, nothing is wrong; if not, give the policy room to "
        "reason (raise rollout.max_new_tokens, lower completions/clipped_ratio), start from a "
        "model that reasons step by step, and check that logging.reflection_words are words "
        "this model uses",
    )


RULES: tuple[Callable[[Sequence[Row]], Finding | None], ...] = (
    nan_loss,
    kl_high,
    kl_zero,
    saturation,
    reward_at_floor,
    length_collapse,
    reward_hacking,
    reward_spike_collapse,
    reflection_flat,
    entropy_collapse,
    classic_entropy_low,
    loss_oscillating,
)


def diagnose(rows: Sequence[Row]) -> list[Finding]:
    """Every rule's finding on this metric history, in rule order."""
    return [f for rule in RULES if (f := rule(rows)) is not None]
