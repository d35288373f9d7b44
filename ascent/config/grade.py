"""Config section for `ascent data grade`: `[grade]`.

    [grade]
    k = 8                  # samples per problem (--k overrides)
    easy_at_least = 0.75   # pass rate >= 0.75: easy
    hard_below = 0.25      # pass rate <  0.25: hard; in between: medium

The default thresholds cut the pass rate into quarters: a problem the policy solves at least
three times in four is easy, one it solves less than once in four is hard, the middle half is
medium. At k = 8 that is 6-8 correct samples easy, 2-5 medium, 0-1 hard. A GRPO group learns
nothing from a problem it always or never solves, so the medium bucket is where the policy
learns most, the hard one where it learns least per step (SRPO trains on graded buckets).

Sampling settings left unset are the run's [rollout] ones, so a pass rate is what the policy
would score on that problem in training.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from ascent.config.base import Section

Difficulty = Literal["easy", "medium", "hard"]
DIFFICULTIES: tuple[str, ...] = get_args(Difficulty)


class GradeSection(Section):
    """`[grade]`: how `ascent data grade` samples each problem and buckets its pass rate."""

    k: int = Field(
        8,
        ge=1,
        description="Samples per problem; pass_rate = correct samples / k (--k overrides).",
    )
    easy_at_least: float = Field(
        0.75,
        ge=0.0,
        le=1.0,
        description="A problem whose pass rate is at least this is easy (default: solved at "
        "least 3 times in 4; at k = 8, 6 or more correct).",
    )
    hard_below: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="A problem whose pass rate is below this is hard (default: solved less "
        "than once in 4; at k = 8, 0 or 1 correct); in between: medium.",
    )
    temperature: float | None = Field(
        None,
        gt=0.0,
        description="Sampling temperature; unset: [rollout] temperature (what training samples "
        "with).",
    )
    max_new_tokens: int | None = Field(
        None, ge=1, description="Longest completion, in tokens; unset: [rollout] max_new_tokens."
    )

    @model_validator(mode="after")
    def _ordered(self) -> GradeSection:
        if self.hard_below > self.easy_at_least:
            raise ValueError(
                f"[grade] hard_below ({self.hard_below}) is above easy_at_least "
                f"({self.easy_at_least}), so a pass rate could be both; keep hard_below <= "
                "easy_at_least (e.g. 0.25 and 0.75)"
            )
        return self
