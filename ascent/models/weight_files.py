"""A model directory's weight files, checked before transformers reads them.

transformers meets a damaged file with a traceback from deep inside its loader (safetensors'
"header too large", a truncated read, a dangling symlink), and meets a pickled
`pytorch_model.bin` whose contents are not plain tensors with advice to pass
`weights_only=False`, that is, to let the file run code. A run directory or a model shared by
someone else is data, so here every weight file is looked at first, cheaply (a safetensors
header and the file's size, not its tensors), and anything wrong is one line naming the file.

Pickled weights (`*.bin`, `*.pt`, `*.pth`) are refused outright when no safetensors sit beside
them: ascent loads weights only from safetensors, which holds nothing that can run.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from ascent.errors import AscentError

SAFETENSORS = ".safetensors"
PICKLED = (".bin", ".pt", ".pth", ".ckpt")
MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit on a header


def check_weight_files(directory: Path) -> None:
    """Refuse, naming the file, a model directory whose weights would not load cleanly."""
    files = sorted(p for p in directory.iterdir() if _is_weights(p.name))
    safetensors = [p for p in files if p.name.endswith(SAFETENSORS)]
    pickled = [p for p in files if p.name.endswith(PICKLED)]
    if pickled and not safetensors:
        raise AscentError(
            f"{pickled[0]}: pickled weights are refused (loading a pickle can run code); "
            "convert the model to safetensors (save_pretrained(..., safe_serialization=True) "
            "where you trust the file) and point at that directory"
        )
    for path in safetensors:
        problem = safetensors_problem(path)
        if problem is not None:
            raise AscentError(
                f"{path}: {problem}; the file is damaged or not a model's weights: export or "
                "download the model again"
            )


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a .safetensors file, from its header and size; None when nothing."""
    if path.is_symlink() and not path.exists():
        return f"a symlink to {path.readlink()}, which does not exist"
    if not path.is_file():
        return "not a regular file"
    size = path.stat().st_size
    try:
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                return f"{size} bytes: too short to hold a safetensors header"
            (length,) = struct.unpack("<Q", head)
            if length > min(MAX_HEADER_BYTES, size - 8):
                return f"a header of {length:,} bytes announced in a file of {size:,}"
            header = json.loads(handle.read(length))
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "its header is not valid JSON"
    if not isinstance(header, dict):
        return "its header is not a table of tensors"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(x, int) for x in offsets)
        ):
            return f"tensor {name!r} has no valid data_offsets"
        end = max(end, offsets[1])
    if 8 + length + end > size:
        return f"truncated: its tensors need {8 + length + end:,} bytes, the file has {size:,}"
    return None


def _is_weights(name: str) -> bool:
    return name.endswith((SAFETENSORS, *PICKLED)) and not name.startswith(".")
