"""docs/config.md is generated from the config models and must not drift from them."""

from __future__ import annotations

from ascent.configfile.docs import DOCS_PATH, render


def test_config_reference_is_up_to_date():
    assert DOCS_PATH.is_file(), "run: python -m ascent.configfile.docs --write"
    assert DOCS_PATH.read_text() == render(), (
        "docs/config.md is out of date; regenerate it with: "
        "python -m ascent.configfile.docs --write"
    )


def test_reference_lists_every_key_with_its_description():
    text = render()
    assert "| `kl_coef` | float | `0.001` |" in text
    assert "### `[model.lora]`" in text
    assert "Completions per step" in text
