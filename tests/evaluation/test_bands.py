"""Which table row a problem lands in: rating bands, difficulty labels, unrated."""

from __future__ import annotations

import pytest

from ascent.config.evaluation import DEFAULT_BANDS
from ascent.evaluation.bands import Band, band_of, label_note


@pytest.mark.parametrize(
    ("rating", "label"),
    [
        (0, "[0, 1200)"),
        (1199, "[0, 1200)"),
        (1200, "[1200, 1800)"),
        (1800, "[1800, 2400)"),
        (2399, "[1800, 2400)"),
        (2400, "[2400, 4000]"),
        (4000, "[2400, 4000]"),  # the last band includes its upper end
    ],
)
def test_rating_goes_to_the_half_open_band_that_holds_it(rating, label):
    band = band_of(rating, "B", DEFAULT_BANDS)
    assert band.label == label and band.kind == "rating"


def test_ratings_outside_every_band_are_a_row_of_their_own():
    assert band_of(4001, None, DEFAULT_BANDS).kind == "outside"
    assert band_of(900, None, [(1000, 2000)]).label == "rating outside rating_bands"


def test_unrated_problems_are_grouped_by_label_never_given_a_rating():
    band = band_of(None, "C", DEFAULT_BANDS)
    assert band == Band("C (no rating)", "label")
    assert band_of(None, None, DEFAULT_BANDS) == Band("unrated", "unrated")
    assert label_note([band]) is not None and "not a rating band" in label_note([band])
    assert label_note([band_of(1500, None, DEFAULT_BANDS)]) is None


def test_table_order_is_ratings_then_letters_then_levels_then_unrated():
    bands = [
        band_of(None, None, DEFAULT_BANDS),
        band_of(None, "HARD", DEFAULT_BANDS),
        band_of(None, "MEDIUM", DEFAULT_BANDS),
        band_of(None, "C", DEFAULT_BANDS),
        band_of(None, "A", DEFAULT_BANDS),
        band_of(4100, None, DEFAULT_BANDS),
        band_of(2000, None, DEFAULT_BANDS),
        band_of(100, None, DEFAULT_BANDS),
    ]
    ordered = [b.label for b in sorted(bands, key=Band.sort_key)]
    assert ordered == [
        "[0, 1200)",
        "[1800, 2400)",
        "rating outside rating_bands",
        "A (no rating)",
        "C (no rating)",
        "MEDIUM (no rating)",
        "HARD (no rating)",
        "unrated",
    ]
