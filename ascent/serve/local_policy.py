"""The model behind `ascent serve`: a model directory, a run directory, or a built-in name.

`LocalPolicy.load(target)` accepts
- a built-in name (`ascent:tiny`, ...),
- a save_pretrained directory (it holds `config.json`),
- a checkpoint directory holding `model/`, or a trainer checkpoint (`state.pt`), whose weights
  are exported once to its `model/` with the run's tokenizer,
- a run directory: its `final-model/` (what a finished LLM run exports), else that of the
  last stage of a staged run, else its best checkpoint, else its latest.
It loads with `ascent.models` (the same code the trainer uses) and samples with the rollout
engine's transformers decoder, so a served policy answers exactly as it did in training.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ascent.errors import AscentError
from ascent.models.loading import has_tokenizer_files
from ascent.models.prompting import continuation_ids, has_chat_template, prompt_ids, render_chat
from ascent.serve.batching import Generation, GenParams

BUILTIN_PREFIX = "ascent:"


def find_model_dir(target: str | Path) -> Path:
    """The save_pretrained directory to serve for `target` (see the module docstring)."""
    path = Path(target)
    if not path.exists():
        raise AscentError(
            f"{target}: no such file or directory; pass a model directory (with config.json), "
            "a run directory (runs/NAME) or a built-in name such as ascent:tiny"
        )
    if not path.is_dir():
        kind = "a file" if path.is_file() else "not a regular file or directory"
        raise AscentError(
            f"{target}: {kind}; pass the directory that holds the model (a save_pretrained "
            "directory with config.json, a checkpoint step-N/ or a run directory)"
        )
    if (path / "config.json").is_file():
        return path
    if (path / "model" / "config.json").is_file():
        return path / "model"
    from ascent.rundir import FINAL_MODEL, best_checkpoint, latest_checkpoint
    from ascent.train.checkpoint import STATE_FILE

    if (path / STATE_FILE).is_file():
        return export_checkpoint(path)

    candidates = [path / FINAL_MODEL, *sorted(path.glob(f"stages/*/{FINAL_MODEL}"), reverse=True)]
    for candidate in candidates:
        if (candidate / "config.json").is_file():
            return candidate
    for ckpt in (best_checkpoint(path), latest_checkpoint(path)):  # a run that did not finish
        if ckpt is not None:
            return find_model_dir(ckpt)
    raise AscentError(
        f"{target}: no model found: expected a model directory with config.json, a run "
        f"directory with {FINAL_MODEL}/ or checkpoints, or one checkpoint; check the path"
    )


def _run_model(path: Path) -> Any | None:
    """The LLM `[model]` section of the run `path` (a checkpoint or model directory) lies in:
    the nearest config.toml at or above it; None when there is none or it is not an LLM run.
    Its trust_remote_code is not taken from the run directory (`load_run_config`)."""
    from ascent.configfile import load_run_config
    from ascent.rules import LLMConfig

    for parent in [path.resolve(), *list(path.resolve().parents)[:3]]:
        if (parent / "config.toml").is_file():
            cfg, notes = load_run_config(parent)
            for note in notes:
                print(f"warning: {note}", file=sys.stderr)
            return cfg.model if isinstance(cfg, LLMConfig) else None
    return None


def export_checkpoint(ckpt: Path) -> Path:
    """A trainer checkpoint's policy as `ckpt/model/` (save_pretrained, tokenizer included):
    the run's [model] rebuilt, the checkpoint's weights loaded, LoRA adapters merged."""

    from ascent.models import load_tokenizer
    from ascent.train.checkpoint import export_model
    from ascent.train.llm_checkpoint import policy_from_checkpoint

    model_cfg = _run_model(ckpt)
    if model_cfg is None:
        raise AscentError(
            f"{ckpt}: a trainer checkpoint, but no LLM run config.toml above it to rebuild the "
            "model from; pass the run directory or a save_pretrained model directory"
        )
    policy = policy_from_checkpoint(ckpt, model_cfg)
    if model_cfg.lora.enabled:
        policy = policy.merge_and_unload()
    return export_model(ckpt / "model", policy, load_tokenizer(model_cfg))


def run_tokenizer(model_dir: Path) -> str | None:
    """Where the tokenizer is when a checkpoint saved only the weights: the run's [model]."""
    if has_tokenizer_files(model_dir):
        return None
    model = _run_model(model_dir.parent)
    return None if model is None else model.tokenizer or model.name_or_path


class LocalPolicy:
    """A `Generator` (see ascent.serve.server) over a transformers causal LM."""

    def __init__(self, model: Any, tokenizer: Any, name: str, source: str) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.source = source
        self.device = next(model.parameters()).device
        limit = getattr(model.config, "max_position_embeddings", None)
        self.max_context: int | None = int(limit) if limit else None
        eos = tokenizer.eos_token_id
        self._eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        self._eos_ids += [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])
        self._engine = _engine(model, tokenizer.pad_token_id, self._eos_ids)

    @classmethod
    def load(cls, target: str, name: str | None = None, device: str = "auto") -> LocalPolicy:
        import torch

        from ascent.config.llm_sections import ModelSection
        from ascent.models import load_reference, load_tokenizer

        tokenizer_source = None
        if target.startswith(BUILTIN_PREFIX):
            source, default_name = target, target
        else:
            model_dir = find_model_dir(target)
            source = str(model_dir)
            run = Path(target).resolve()
            default_name = run.name if run != model_dir.resolve() else model_dir.resolve().name
            tokenizer_source = run_tokenizer(model_dir)
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        cfg = ModelSection(name_or_path=source, tokenizer=tokenizer_source)
        tokenizer = load_tokenizer(cfg)
        model = load_reference(cfg, torch.device(device))
        return cls(model, tokenizer, name or default_name, source)

    # -- Generator protocol -------------------------------------------------------------------

    # Prompts are built and encoded by `ascent.models.prompting`, as the trainer builds them:
    # a chat prompt (a `ChatText`) keeps the special tokens its template wrote and gets no
    # more; a raw /v1/completions prompt gets the tokenizer's (no second BOS).

    def encode(self, text: str) -> list[int]:
        return prompt_ids(self.tokenizer, [text])[0]

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def chat_prompt(self, messages: Sequence[dict[str, Any]]) -> str:
        # no template (e.g. the tiny model): the contents, in order, as the model was trained
        return render_chat(self.tokenizer, messages, template=has_chat_template(self.tokenizer))

    def generate(self, prompts: Sequence[str], params: GenParams) -> list[Generation]:
        ids = prompt_ids(self.tokenizer, prompts)
        rows = self._engine(ids, params)
        outs = []
        for prompt, (tokens, ended) in zip(ids, rows, strict=True):
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            used = len(tokens) + int(ended)  # the EOS token counts, as with other servers
            finish = "stop" if ended else "length"
            cut = min((i for i in (text.find(s) for s in params.stop) if i >= 0), default=-1)
            if cut >= 0:
                text, finish = text[:cut], "stop"
                used = len(continuation_ids(self.tokenizer, text))
            outs.append(Generation(text, finish, len(prompt), used))
        return outs


def _engine(model: Any, pad_id: int | None, eos_ids: list[int]):
    """`sample(prompt_ids, params) -> [(completion ids without EOS, ended with EOS)]`."""
    pad = pad_id if pad_id is not None else eos_ids[0]
    try:
        from ascent.rollout.sampling import SamplingParams
        from ascent.rollout.transformers_engine import TransformersEngine
    except ImportError:  # pragma: no cover - only while the rollout package is absent
        return _hf_engine(model, pad, eos_ids)
    engine = TransformersEngine(model, pad_id=pad, eos_ids=eos_ids)

    def sample(prompt_ids: list[list[int]], params: GenParams) -> list[tuple[list[int], bool]]:
        greedy = params.temperature == 0
        sampling = SamplingParams(
            max_new_tokens=params.max_tokens,
            temperature=1.0 if greedy else params.temperature,
            top_p=params.top_p,
            greedy=greedy,
        )
        batch = engine.generate(prompt_ids, list(range(len(prompt_ids))), 1, sampling)
        out = []
        for row in range(len(batch)):
            mask = batch.response_mask[row].bool()
            tokens = batch.response_ids[row][mask].tolist()
            ended = bool(batch.finished[row])
            if ended and tokens and tokens[-1] in eos_ids:
                tokens = tokens[:-1]
            out.append((tokens, ended))
        return out

    return sample


def _hf_engine(model: Any, pad: int, eos_ids: list[int]):  # pragma: no cover - fallback
    import torch

    @torch.no_grad()
    def sample(prompt_ids: list[list[int]], params: GenParams) -> list[tuple[list[int], bool]]:
        width = max(len(p) for p in prompt_ids)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_ids], device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids])
        greedy = params.temperature == 0
        out = model.generate(
            input_ids=ids,
            attention_mask=mask.to(model.device),
            max_new_tokens=params.max_tokens,
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p,
            pad_token_id=pad,
            eos_token_id=eos_ids,
        )
        rows = []
        for row in out[:, width:].tolist():
            ended = next((i for i, t in enumerate(row) if t in eos_ids), None)
            rows.append((row[:ended] if ended is not None else row, ended is not None))
        return rows

    return sample
