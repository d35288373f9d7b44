"""Which row of the results table a problem belongs to.

A problem with a rating goes to the rating band [low, high) that holds it (the last band
includes its upper end). A problem without one is never given an invented rating: it is
grouped by its difficulty label (a Codeforces problem letter, a CodeChef word), and the table
says so; a problem with neither is "unrated".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ascent.errors import AscentError

BandKind = Literal["rating", "label", "outside", "unrated"]
# CodeChef-style words in increasing difficulty; other labels sort alphabetically after them.
WORD_ORDER = ("EASY", "MEDIUM", "MEDIUM_HARD", "HARD", "VERY_HARD")
NO_RATING = " (no rating)"
P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Band:
    """One row of the table."""

    label: str  # what the table prints
    kind: BandKind
    low: int | None = None  # rating bands only
    high: int | None = None

    def sort_key(self) -> tuple[int, int, int, str]:
        if self.kind == "rating":
            return (0, self.low or 0, 0, "")
        if self.kind == "outside":
            return (1, 0, 0, "")
        if self.kind == "label":
            name = self.label.removesuffix(NO_RATING)
            word = WORD_ORDER.index(name.upper()) if name.upper() in WORD_ORDER else len(WORD_ORDER)
            return (2, 0 if len(name) <= 2 else 1 + word, 0, name)
        return (3, 0, 0, "")


def band_of(rating: int | None, difficulty: str | None, bands: Sequence[tuple[int, int]]) -> Band:
    """The table row of a problem with this rating (or None) and difficulty label (or None)."""
    if rating is not None:
        for i, (low, high) in enumerate(bands):
            last = i == len(bands) - 1
            if low <= rating < high or (last and rating == high):
                closing = "]" if last else ")"
                return Band(f"[{low}, {high}{closing}", "rating", low, high)
        return Band("rating outside rating_bands", "outside")
    if difficulty:
        return Band(f"{difficulty}{NO_RATING}", "label")
    return Band("unrated", "unrated")


def label_note(bands: Sequence[Band]) -> str | None:
    """The table's footnote when some rows are difficulty labels rather than ratings."""
    if not any(b.kind == "label" for b in bands):
        return None
    return (
        "no rating in the data: rows 'X (no rating)' group problems by their difficulty label "
        "(a Codeforces problem letter or a CodeChef level), which is not a rating band"
    )


@dataclass(frozen=True)
class Skipped:
    """Problems `[eval] only_bands` left out: without a rating, or rated outside every band."""

    no_rating: int = 0
    outside: int = 0

    @property
    def total(self) -> int:
        return self.no_rating + self.outside

    def to_json(self) -> dict[str, int]:
        return {"no_rating": self.no_rating, "outside_bands": self.outside}

    def note(self) -> str | None:
        if not self.total:
            return None
        return (
            f"only_bands: {self.total} problem(s) of the file skipped: {self.no_rating} without "
            f"a rating, {self.outside} rated outside every band"
        )


def in_bands(
    problems: Sequence[P],
    bands: Sequence[tuple[int, int]],
    rating_of: Callable[[P], Any] = lambda problem: getattr(problem, "rating", None),
) -> tuple[list[P], Skipped]:
    """The problems whose rating (`rating_of`) lies in one of `bands`, and the count of the
    others."""
    kept: list[P] = []
    no_rating = outside = 0
    for problem in problems:
        rating = rating_of(problem)
        if rating is None:
            no_rating += 1
        elif band_of(rating, None, bands).kind == "rating":
            kept.append(problem)
        else:
            outside += 1
    return kept, Skipped(no_rating, outside)


def no_problem_in_bands(where: str, skipped: Skipped) -> AscentError:
    """The one line for `only_bands` keeping nothing, with what there was instead."""
    return AscentError(
        f"{where}: no problem is rated inside [eval] rating_bands ({skipped.no_rating} "
        f"without a rating, {skipped.outside} outside every band); widen rating_bands, "
        "or set only_bands = false"
    )


def rows_by_band(
    results: Sequence[R], band: Callable[[R], Band], row: Callable[[str, str, list[R]], Any]
) -> list[Any]:
    """One table row per band in table order, then the row for all problems: every results
    table (pass@k, agentic, test-time RL) groups the same way."""
    groups: dict[Band, list[R]] = {}
    for result in results:
        groups.setdefault(band(result), []).append(result)
    rows = [row(b.label, b.kind, groups[b]) for b in sorted(groups, key=Band.sort_key)]
    return [*rows, row("all", "all", list(results))]
