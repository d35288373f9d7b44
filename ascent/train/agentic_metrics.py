"""Metrics and sample rows of an agentic step (names next to the trainer's, see controller.py):

    reward                   mean delayed reward of the step's episodes (the outcome)
    reward/delayed           the same: hidden-test reward of each episode's submitted program
    reward/immediate         mean immediate reward of the policy's turns (tiers, penalties)
    reward_std, frac_reward_zero_std   of the delayed reward within groups
    agentic/solved           fraction of episodes whose program passed every hidden test
    agentic/turns            solve attempts per episode
    agentic/summarizations   summaries per episode
    agentic/unparsable       fraction of the policy's turns that could not be parsed
    agentic/broken           fraction of solve turns broken by a confirmed generated test
    agentic/tests_confirmed  fraction of generated tests the reference solution confirmed
    agentic/sandbox_errors   episodes left unjudged by a sandbox failure
    agentic/staleness        policy versions behind, mean over rows (also _max)
    agentic/dropped_stale    groups dropped for exceeding max_staleness (replaced)
    agentic/tokens/<role>    tokens the role produced this step (policy, API or script)
    agentic/sandbox_runs     sandbox jobs this step (verdict cache misses)

The loss adds is_weight_mean, is_weight_max and is_clip_frac (the off-policy weights) and
clip_ratio; `api_usage.json` in the run directory has the API roles' totals.
"""

from __future__ import annotations

from statistics import mean, pstdev

from ascent.data import Problem
from ascent.rewards import RewardOutput
from ascent.rollout.agentic.producer import Group
from ascent.rollout.agentic.rows import AgenticRows
from ascent.rollout.agentic.transcript import Episode
from ascent.train.distributed import Dist

# Metrics that count things (summed over ranks); the rest are rates or means (averaged over
# the ranks that report them: every rank plays the same number of groups) or maxima.
_COUNTS = {"agentic/sandbox_errors", "agentic/dropped_stale", "agentic/sandbox_runs",
           "agentic/rows", "tokens"}  # fmt: skip
_COUNT_PREFIX = "agentic/tokens/"  # tokens per role
_MAXIMA = ("agentic/staleness_max", "completions/max_length")


def _fraction(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def _group_metrics(groups: list[Group]) -> dict[str, float]:
    stds = []
    for group in groups:
        values = [e.delayed for e in group.episodes if e.delayed is not None]
        if len(values) > 1:
            stds.append(pstdev(values) * (len(values) / (len(values) - 1)) ** 0.5)
    if not stds:
        return {}
    return {"reward_std": mean(stds), "frac_reward_zero_std": _fraction([s < 1e-8 for s in stds])}


def _generated_tests(episodes: list[Episode]) -> dict[str, float]:
    testgen = [t for ep in episodes for t in ep.turns if t.role == "testgen"]
    confirmed = sum(t.tests_confirmed for t in testgen)
    proposed = sum(t.tests_proposed for t in testgen)
    return {"agentic/tests_confirmed": confirmed / proposed} if proposed else {}


def episode_metrics(groups: list[Group], dropped: list[int]) -> dict[str, float]:
    """What the step's episodes did (all of them, trained on or not)."""
    episodes = [e for g in groups for e in g.episodes]
    judged = [e for e in episodes if e.delayed is not None]
    policy_turns = [t for e in judged for t in e.turns if t.source == "policy"]
    solves = [t for e in judged for t in e.turns if t.role == "solver"]
    metrics: dict[str, float] = {
        "agentic/turns": mean(e.attempts for e in episodes),
        "agentic/summarizations": mean(e.summaries for e in episodes),
        "agentic/sandbox_errors": float(sum(e.stop == "sandbox_error" for e in episodes)),
        "agentic/dropped_stale": float(len(dropped)),
        "agentic/unparsable": _fraction([not t.parsed for t in policy_turns]),
        "agentic/broken": _fraction([t.broken for t in solves]),
    }
    if judged:
        delayed = mean(e.delayed for e in judged if e.delayed is not None)
        metrics |= {"reward": delayed, "reward/delayed": delayed}
        metrics["agentic/solved"] = _fraction([e.solved for e in judged])
    if policy_turns:
        metrics["reward/immediate"] = mean(t.reward for t in policy_turns)
    tokens: dict[str, int] = {}
    for ep in episodes:
        for turn in ep.turns:
            tokens[turn.role] = tokens.get(turn.role, 0) + turn.tokens
    metrics |= {f"agentic/tokens/{role}": float(n) for role, n in sorted(tokens.items())}
    return metrics | _group_metrics(groups) | _generated_tests(episodes)


def row_metrics(rows: AgenticRows, version: int) -> dict[str, float]:
    lengths = rows.rollout.response_lengths.float()
    staleness = [version - v for v in rows.row_version]
    return {
        "completions/mean_length": float(lengths.mean()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float((~rows.rollout.finished).float().mean()),
        "agentic/rows": float(len(rows.row_episode)),
        "agentic/staleness": mean(staleness),
        "agentic/staleness_max": float(max(staleness)),
    }


def sample_view(rows: AgenticRows, decode) -> tuple[list[Problem], list[str], RewardOutput]:
    """Per row: its problem, its decoded response (the policy's turns and what it observed
    between them) and its episode's rewards; the details hold the whole episode transcript."""
    problems, completions, total, immediate, details = [], [], [], [], []
    for row, e in enumerate(rows.row_episode):
        ep = rows.episodes[e]
        problems.append(ep.problem)
        completions.append(decode(rows.rollout.response_ids[row]))
        total.append(ep.delayed)
        turns = [t.reward for t in ep.turns if t.source == "policy"]
        immediate.append(mean(turns) if turns else None)
        details.append({"agentic": ep.to_json()})
    components = {"immediate": immediate, "delayed": list(total)}
    return problems, completions, RewardOutput(total, components, details)


def over_ranks(dist: Dist, metrics: dict[str, float]) -> dict[str, float]:
    """One rank's step metrics combined with the other ranks': counts summed, maxima taken,
    the rest averaged over the ranks that have them (a rank with no judged episode reports
    no reward). Every rank must call it, in the same order."""
    if not dist.distributed:
        return metrics
    views = dist.gather(metrics)
    out: dict[str, float] = {}
    for key in sorted({k for v in views for k in v}):
        values = [v[key] for v in views if key in v]
        if key in _COUNTS or key.startswith(_COUNT_PREFIX):
            out[key] = float(sum(values))
        elif key in _MAXIMA:
            out[key] = float(max(values))
        else:
            out[key] = float(mean(values))
    return out
