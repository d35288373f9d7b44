"""A model directory with damaged or pickled weights is refused in one line naming the file,
before transformers reads it: through `ascent eval` and `ascent serve` too."""

from __future__ import annotations

import json
import pickle
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from ascent.errors import AscentError
from ascent.models.builtin import BUILTIN_MODELS
from ascent.models.weight_files import check_weight_files, safetensors_problem


@pytest.fixture
def model_dir(tmp_path) -> Path:
    """A copy of the shipped tiny model's save_pretrained directory."""
    target = tmp_path / "model"
    shutil.copytree(BUILTIN_MODELS["ascent:tiny"](), target)
    return target


def test_a_sound_file_passes_and_each_damage_is_named(tmp_path):
    good = tmp_path / "good.safetensors"
    save_file({"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(4)}, str(good))
    assert safetensors_problem(good) is None
    data = good.read_bytes()
    cases = {
        "garbage": (b"\xff" * 300, "header of"),
        "truncated": (data[:-5], "truncated: its tensors need"),
        "tiny": (b"\x01\x02", "too short"),
        "not json": (struct.pack("<Q", 4) + b"{{{{" + b"\0" * 16, "not valid JSON"),
        "bad offsets": (
            _with_header({"w": {"dtype": "F32", "shape": [1]}}),
            "no valid data_offsets",
        ),
    }
    for name, (content, expected) in cases.items():
        path = tmp_path / f"{name}.safetensors"
        path.write_bytes(content)
        problem = safetensors_problem(path)
        assert problem is not None and expected in problem, (name, problem)
    dangling = tmp_path / "dangling.safetensors"
    dangling.symlink_to(tmp_path / "nowhere")
    assert "does not exist" in safetensors_problem(dangling)
    linked = tmp_path / "linked.safetensors"
    linked.symlink_to(good)  # a hub cache's symlink to its blob is fine
    assert safetensors_problem(linked) is None
    device = tmp_path / "device.safetensors"
    device.symlink_to("/dev/zero")
    assert safetensors_problem(device) == "not a regular file"


def _with_header(header: dict) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + b"\0" * 8


def test_pickled_weights_without_safetensors_are_refused(model_dir):
    (model_dir / "model.safetensors").unlink()
    torch.save({"x": torch.ones(2)}, model_dir / "pytorch_model.bin")
    with pytest.raises(AscentError, match=r"pytorch_model\.bin: pickled weights are refused"):
        check_weight_files(model_dir)


class Mark:
    def __reduce__(self):
        return (Path.touch, (Path("/tmp/ascent-weights-mark"),))


@pytest.mark.parametrize("command", ["serve", "eval"])
@pytest.mark.parametrize("damage", ["garbage", "truncated", "symlink", "pickle"])
def test_eval_and_serve_refuse_a_damaged_model_in_one_line(model_dir, run_cli, damage, command):
    weights = model_dir / "model.safetensors"
    if damage == "garbage":
        weights.write_bytes(b"\x00\xff" * 500)
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:-1000])
    elif damage == "symlink":
        weights.unlink()
        weights.symlink_to(model_dir / "gone.safetensors")
    else:
        weights.unlink()
        Path("/tmp/ascent-weights-mark").unlink(missing_ok=True)
        (model_dir / "pytorch_model.bin").write_bytes(pickle.dumps({"x": Mark()}))
    if command == "serve":
        code, out, err = run_cli("serve", str(model_dir), "--port", "0")
    else:
        config = model_dir.parent / "eval.toml"
        config.write_text(
            f'[model]\nname_or_path = "{model_dir}"\n[eval]\n'
            'problems = "ascent:code_contests_sample"\npolicy = "local"\n'
        )
        code, out, err = run_cli("eval", str(config))
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {model_dir}/") and "Traceback" not in out + err
    assert "weights_only=False" not in line
    assert not Path("/tmp/ascent-weights-mark").exists()  # nothing in the pickle ran
