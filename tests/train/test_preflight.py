"""Bad input to `ascent train` is refused in one line on stderr that names the fix, with exit
code 2, no traceback, no weights loaded and nothing written: a model directory without a
tokenizer, a chat template required of a tokenizer without one, a run that cannot fit."""

from __future__ import annotations

import re

import pytest

from ascent.models import loading
from ascent.models.smollm2 import SMOLLM2


@pytest.fixture
def no_weights_load(monkeypatch):
    """Fail the test if any model's weights start loading."""
    loads = []

    def refuse(source, *args, **kwargs):
        loads.append(source)
        raise AssertionError(f"weights of {source} were loaded")

    monkeypatch.setattr(loading, "_from_pretrained", refuse)
    return loads


def refused(run_cli, cwd, *settings: str) -> str:
    """Run `ascent train --set ...` in `cwd`; check the refusal's form; return its line."""
    args = [a for s in settings for a in ("--set", s)]
    code, out, err = run_cli("train", *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in out + err
    assert list(cwd.iterdir()) == [], "the refusal wrote files"
    return lines[0]


def mib(line: str, pattern: str) -> int:
    match = re.search(pattern, line)
    assert match, (pattern, line)
    return int(match.group(1).replace(",", ""))


def test_a_model_directory_without_a_tokenizer(
    smollm2_dir, tmp_path, cwd, run_cli, no_weights_load
):
    model = tmp_path / "model"  # config.json and the weights (linked), no tokenizer files
    model.mkdir()
    (model / "config.json").write_bytes((smollm2_dir / "config.json").read_bytes())
    (model / "model.safetensors").symlink_to(smollm2_dir / "model.safetensors")
    line = refused(run_cli, cwd, f'model.name_or_path="{model}"')
    assert f"{model} has no tokenizer" in line
    assert "[model] tokenizer" in line and "add the tokenizer files" in line
    assert no_weights_load == []


def test_a_chat_template_required_of_a_tokenizer_without_one(
    tmp_path, monkeypatch, run_cli, no_weights_load
):
    monkeypatch.chdir(tmp_path)
    line = refused(run_cli, tmp_path, 'model.name_or_path="ascent:tiny"', 'data.chat_template="on"')
    assert '[data] chat_template: "on"' in line and "has no chat template" in line
    assert '"auto" or "off"' in line
    assert no_weights_load == []


def test_a_run_that_cannot_fit_is_refused_with_the_estimate_before_weights_load(
    smollm2_dir, cwd, run_cli, no_weights_load
):
    line = refused(
        run_cli,
        cwd,
        f'model.name_or_path="{SMOLLM2}"',
        "train.micro_batch_size=8",
        "rollout.max_new_tokens=8000",  # inside the 8,192-token context
    )
    need, available, activations, logits = (
        mib(line, r"needs about ([\d,]+) MiB"),
        mib(line, r"has ([\d,]+) MiB available"),
        mib(line, r"activations ([\d,]+)"),
        mib(line, r"logits ([\d,]+)"),
    )
    assert need > available > 0
    # SmolLM2 (hidden 576, 9 heads of 64, 3 key/value heads, intermediate 1,536, 30 layers),
    # float32, lean layers: the norms' inputs 2 x 576 values, attention 576 + 2 x 576 + 2 x
    # 192, the MLP 576 + 2 x 1,536: 6,912 values a layer; 30 layers plus 4 hidden vectors
    # 209,664 values = 838,656 bytes; 8 rows x (prompt + 8,000) tokens: 51,188 MiB for the
    # completions' tokens, a few more for the prompts' (under 300 tokens each)
    assert 51_187 < activations < 8 * 8_300 * 838_656 / 2**20
    # the fused LM head holds one chunk of 2^25 float32 logits and its softmax: 256 MiB,
    # however long the rows (the full logits would be millions of MiB)
    assert logits == 256
    assert "[train] micro_batch_size" in line and "[rollout] max_new_tokens" in line
    assert "[model] gradient_checkpointing" in line
    assert no_weights_load == []


def test_the_same_model_fits_a_laptop_with_short_completions_and_not_a_small_vm(
    smollm2_dir, monkeypatch
):
    """The check refuses what cannot fit, not every real model: SmolLM2 with 64-token
    completions (about 5 GiB) passes with 16,000 MiB available and is refused with 2,000."""
    from ascent.configfile import load_config
    from ascent.errors import AscentError
    from ascent.train import llm_preflight
    from ascent.train.distributed import Dist

    settings = [f'model.name_or_path="{SMOLLM2}"', "train.micro_batch_size=8"]
    cfg = load_config(None, [*settings, "rollout.max_new_tokens=64"])
    monkeypatch.setattr(llm_preflight, "available_mib", lambda device: 16_000.0)
    llm_preflight.preflight(cfg, Dist.single())
    monkeypatch.setattr(llm_preflight, "available_mib", lambda device: 2_000.0)
    with pytest.raises(AscentError, match=r"needs about [\d,]+ MiB .* has 2,000 MiB available"):
        llm_preflight.preflight(cfg, Dist.single())
