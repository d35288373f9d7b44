"""`ascent plan CONFIG`: what a run will need before any weight loads: peak memory per device,
tokens per step, and the time of a training step, on this CPU and on named GPUs.

Memory is `ascent.models.memory`'s estimate (the one `--dry-run` and the start of a run refuse
with); time is `ascent.models.step_time`'s model on the device's rates: this CPU's measured
at the model's shapes, the GPUs' declared (`ascent.models.hardware`). Both read only the
model's config.json, the tokenizer and the data (for prompt lengths).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ascent.data import PromptFormatter, load_task, uses_chat_template
from ascent.errors import AscentError, ConfigError
from ascent.models import load_tokenizer, resolve_dtype
from ascent.models.hardware import GPUS, HARDWARE_NAMES, Hardware, measure_cpu
from ascent.models.memory import (
    MemoryEstimate,
    dims,
    estimate_memory,
    lora_parameter_count,
    parameter_count,
)
from ascent.models.step_time import StepShape, StepTime, predict_step
from ascent.rules import LLMConfig
from ascent.runtime import configure_cpu
from ascent.train.distributed import Dist
from ascent.train.llm_preflight import measured_prompts, model_config, run_shape
from ascent.train.parts import algorithm_parts


@dataclass(frozen=True)
class DevicePlan:
    """One run on one kind of device."""

    hardware: Hardware
    memory: MemoryEstimate
    time: StepTime
    sharing: int  # ranks that share the device's memory (CPU ranks share one machine)

    @property
    def peak_mib(self) -> float:
        return self.memory.total

    @property
    def fits(self) -> bool:
        return self.memory.total * self.sharing <= self.hardware.memory_mib


@dataclass
class Plan:
    """A run's plan: the settings it was made for, and one DevicePlan per device kind."""

    name: str
    parameters: int
    prompt_tokens: float
    tokens_per_step: int
    world_size: int
    devices: dict[str, DevicePlan] = field(default_factory=dict)


def _prompt_lengths(cfg: LLMConfig) -> tuple[float, int]:
    """(mean, longest) prompt tokens as the policy reads them, over a sample of each split."""
    tokenizer = load_tokenizer(cfg.model)
    chat = uses_chat_template(cfg.data.chat_template, tokenizer)
    task = load_task(cfg.data, cfg.run.seed)
    formatter = PromptFormatter(cfg.data.prompt_template, tokenizer, chat)
    lengths = [len(ids) for ids in formatter.encode(measured_prompts(task))] or [1]
    return sum(lengths) / len(lengths), max(lengths)


def _step_shape(cfg: LLMConfig, world: int, prompt_tokens: float, compute_bytes: int, config):
    t, parts = cfg.train, algorithm_parts(cfg)
    rows = max(1, t.batch_size // world)
    mini_batches = t.batch_size // (t.mini_batch_size or t.batch_size)
    # The trainer's own log-probs anchor the clip unless the engine decodes with the trainer's
    # module in float32 (its log-probs are then the trainer's): one more forward otherwise.
    replicas = cfg.cluster.backend == "ray" and cfg.cluster.rollout_replicas
    engine_exact = (
        cfg.rollout.engine == "transformers"
        and compute_bytes == 4
        and not cfg.rollout.async_
        and not replicas
    )
    old_forward = parts.engine_correction or not engine_exact
    lora = cfg.model.lora
    trained = (
        lora_parameter_count(config, lora.r, tuple(lora.target_modules)) if lora.enabled else None
    )
    return StepShape(
        rows=rows,
        prompts=max(1, rows // cfg.rollout.group_size),
        prompt_tokens=prompt_tokens,
        new_tokens=cfg.rollout.max_new_tokens,
        micro_batch_size=t.micro_batch_size,
        epochs=t.ppo_epochs,
        updates=t.ppo_epochs * mini_batches,
        compute_bytes=compute_bytes,
        checkpointing=cfg.model.gradient_checkpointing,
        extra_forwards=int(old_forward) + int(parts.kl is not None),
        critic=parts.needs_values and cfg.critic.architecture == "separate",
        trained_parameters=trained or 0,
        # train/forward.py runs a group's prompt once, except on sharded ranks (FSDP may not
        # run a layer twice in one graph) and under checkpointing
        shared_prefix=cfg.rollout.group_size > 1
        and world == 1
        and not cfg.model.gradient_checkpointing,
    )


def _gpu_dtype(cfg: LLMConfig) -> torch.dtype:
    """The compute dtype on a data-centre GPU: `auto` is bfloat16 there."""
    if cfg.model.dtype == "auto":
        return torch.bfloat16
    return resolve_dtype(cfg.model.dtype, torch.device("cpu"))


def make_plan(cfg: LLMConfig, nproc: int = 1) -> Plan:
    """Plan `cfg` on `nproc` ranks for this CPU and every named GPU; for a staged run, the
    stage with the largest peak."""
    if cfg.agentic.enabled:
        raise ConfigError(
            "ascent plan: an agentic run's rows grow with its episodes, which no plan can know "
            "in advance; plan the same config without [agentic] for the single-turn part"
        )
    stages = [c for _, c in cfg.stage_configs()] if cfg.stages else [cfg]
    plans = [_plan_one(stage, nproc) for stage in stages]
    return max(plans, key=lambda p: p.devices["cpu"].peak_mib)


def _plan_one(cfg: LLMConfig, nproc: int) -> Plan:
    config = model_config(cfg)
    if config is None:
        raise AscentError(
            f"ascent plan: no config.json for {cfg.model.name_or_path} on this machine; "
            "download the model (or point [model] name_or_path at its directory) first"
        )
    mean_prompt, longest = _prompt_lengths(cfg)
    d = dims(config)
    rows = max(1, cfg.train.batch_size // nproc)
    plan = Plan(
        name=cfg.run.name,
        parameters=parameter_count(config),
        prompt_tokens=mean_prompt,
        tokens_per_step=round(cfg.train.batch_size * (mean_prompt + cfg.rollout.max_new_tokens)),
        world_size=nproc,
    )
    configure_cpu(cfg.run.threads, nproc)  # measure with the threads each rank will use
    cpu = Dist(0, nproc, torch.device("cpu"))
    cpu_dtype = resolve_dtype(cfg.model.dtype, cpu.device)
    # measured at the products a micro-batch runs
    probe = _step_shape(cfg, nproc, mean_prompt, cpu_dtype.itemsize, config)
    micro_tokens = probe.trained_tokens / max(1, -(-probe.rows // probe.micro_batch_size))
    measured = measure_cpu(d.hidden, d.intermediate, round(micro_tokens), rows, cpu_dtype)
    devices: list[tuple[str, Hardware, Dist, torch.dtype]] = [("cpu", measured, cpu, cpu_dtype)]
    gpu = Dist(0, nproc, torch.device("meta"))  # a device that is not a CPU, without CUDA
    devices += [(name, hw, gpu, _gpu_dtype(cfg)) for name, hw in GPUS.items()]
    for name, hw, dist, dtype in devices:
        shape = run_shape(cfg, dist, longest, config.model_type, dtype)
        memory = estimate_memory(config, shape)
        step = _step_shape(cfg, nproc, mean_prompt, dtype.itemsize, config)
        if not step.trained_parameters:  # every weight trains
            step = replace(step, trained_parameters=memory.parameters)
        time = predict_step(d, memory.parameters, step, hw)
        plan.devices[name] = DevicePlan(hw, memory, time, nproc if name == "cpu" else 1)
    return plan


def report(plan: Plan, chosen: str) -> dict[str, Any]:
    """The JSON object `ascent plan` ends with."""
    here = plan.devices[chosen]
    return {
        "hardware": chosen,
        "device": here.hardware.name,
        "peak_memory_mb": round(here.peak_mib),
        "step_s": round(here.time.total, 4),
        "fits": here.fits,
        "tokens_per_step": plan.tokens_per_step,
        "parameters": plan.parameters,
        "world_size": plan.world_size,
        "memory_mb": {
            "trained_state": round(here.memory.trained_state),
            "reference": round(here.memory.reference),
            "critic": round(here.memory.critic),
            "engine_weights": round(here.memory.engine_weights),
            "kv_cache": round(here.memory.kv_cache),
            "activations": round(here.memory.activations),
            "logits": round(here.memory.logits),
            "runtime": round(here.memory.runtime),
        },
        "step_breakdown_s": {
            "generate": round(here.time.generate, 4),
            "forwards": round(here.time.forwards, 4),
            "update": round(here.time.update, 4),
            "critic": round(here.time.critic, 4),
        },
        "by_hardware": {
            name: {
                "peak_memory_mb": round(p.peak_mib),
                "step_s": round(p.time.total, 4),
                "fits": p.fits,
                "memory_mb": round(p.hardware.memory_mib),
                "rates": "measured" if p.hardware.measured else "declared",
            }
            for name, p in plan.devices.items()
        },
    }


def plan_lines(plan: Plan, chosen: str) -> list[str]:
    """The table `ascent plan` prints before its JSON line."""
    here = plan.devices[chosen]
    t = here.time
    lines = [
        f"plan for '{plan.name}': {plan.parameters / 1e6:,.1f} M parameters, "
        f"{plan.world_size} rank(s), {plan.tokens_per_step:,} tokens a step "
        f"(prompts {plan.prompt_tokens:.0f} tokens on average)",
        f"memory on {here.hardware.name}, MiB: {here.memory.breakdown()}",
        f"step on {here.hardware.name}: generate {t.generate:.3f} s, extra forwards "
        f"{t.forwards:.3f} s, update {t.update:.3f} s, critic {t.critic:.3f} s",
        f"{'device':<8} {'peak MiB':>12} {'of MiB':>10} {'fits':>5} {'step s':>9}  rates",
    ]
    for name in HARDWARE_NAMES:
        p = plan.devices[name]
        lines.append(
            f"{name:<8} {p.peak_mib * p.sharing:>12,.0f} {p.hardware.memory_mib:>10,.0f} "
            f"{'yes' if p.fits else 'NO':>5} {p.time.total:>9.3f}  "
            + ("measured here" if p.hardware.measured else p.hardware.name + ", data sheet")
        )
    return lines
