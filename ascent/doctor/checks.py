"""`ascent doctor [CONFIG]`: a checklist of everything a run needs, without training.

Config valid; torch, CUDA and optional extras (and whether the config needs a missing one);
code-sandbox isolation; disk space for checkpoints; each key variable set and plausible; each
endpoint reachable and listing its models; each role's model among them. No completion is
requested (that is `ascent smoke`), so the doctor costs nothing on a paid endpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import importlib.util
import platform
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ascent.api.client import ApiClient, RetryPolicy
from ascent.api.diagnoses import ApiError, BaseUrlError, CallContext, unknown_model
from ascent.api.roles import RoleSpec
from ascent.config.run import RunSection
from ascent.errors import AscentError
from ascent.rules import ClassicConfig

Status = Literal["ok", "warn", "fail", "skip"]

# extra -> (import name, pip spec)
EXTRAS = {
    "vllm": ("vllm", "ascent[vllm]"),
    "ray": ("ray", "ascent[ray]"),
    "peft": ("peft", "ascent[lora]"),
    "datasets": ("datasets", "ascent[data]"),
    "tensorboard": ("tensorboard", "ascent[trackers]"),
    "wandb": ("wandb", "ascent[trackers]"),
    "swanlab": ("swanlab", "ascent[trackers]"),
    "reasoning-gym": ("reasoning_gym", "ascent[envs]"),
    "openenv-core": ("openenv", "ascent[openenv]"),
    "verifiers": ("verifiers", "ascent[verifiers]"),
}
DISK_WARN_GIB = 5.0
DISK_FAIL_GIB = 1.0
DOCTOR_TIMEOUT_SEC = 15.0
NO_ASSISTANT = (
    "a classic PPO run calls an API only for the log assistant, and [assistant] enabled = false"
)


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str


def run_doctor(config: str | Path | None, overrides: Sequence[str] = ()) -> list[Check]:
    """Every check, in order; a failing check never stops the ones after it."""
    from ascent.configfile import load_config

    checks: list[Check] = []
    try:
        cfg = load_config(config, overrides)
        kind = "classic PPO" if isinstance(cfg, ClassicConfig) else "LLM"
        checks.append(Check("config", "ok", f"{cfg.source}: valid ({kind} run)"))
    except AscentError as err:
        checks.append(Check("config", "fail", str(err)))
        cfg = None
    checks += environment_checks(cfg)
    cluster = getattr(cfg, "cluster", None)
    if cluster is not None and cluster.backend == "ray":
        checks += cluster_checks(cluster)
    if isinstance(cfg, ClassicConfig) and not cfg.assistant.enabled:
        checks.append(Check("API roles", "skip", f"{NO_ASSISTANT}: API checks skipped"))
    elif cfg is not None:
        try:
            client = ApiClient.from_config(cfg)
        except AscentError as err:  # e.g. [api] base_url_env names an unset variable
            checks.append(Check("API roles", "fail", str(err)))
        else:
            checks += asyncio.run(api_checks(client))
    return checks


def environment_checks(cfg: Any) -> list[Check]:
    checks = [Check("python", "ok", f"{platform.python_version()} ({platform.machine()})")]
    checks.append(_torch_check())
    checks += _extras_checks(cfg)
    checks.append(_sandbox_check(cfg))
    checks.append(_disk_check(cfg))
    return checks


def cluster_checks(cluster: Any) -> list[Check]:
    """The Ray cluster of `[cluster]`: reachable, big enough, one version of Ray everywhere."""
    from ascent.cluster import runtime

    try:
        ray = runtime.connect(cluster)
    except AscentError as err:
        return [Check("cluster", "fail", str(err))]
    have = ray.cluster_resources()
    where = cluster.address or "a local Ray"
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    checks = [Check("cluster", "ok", f"{where}: {nodes} node(s), "
                    f"{have.get('CPU', 0):g} CPUs, {have.get('GPU', 0):g} GPUs")]  # fmt: skip
    try:
        runtime.check_resources(cluster)
        need = runtime.needed(cluster)
        detail = f"the placement needs {need['CPU']:g} CPUs, {need['GPU']:g} GPUs"
        checks.append(Check("cluster resources", "ok", detail))
    except AscentError as err:
        checks.append(Check("cluster resources", "fail", str(err)))
    try:
        driver = runtime.check_versions(ray)
        checks.append(Check("ray versions", "ok", f"Ray {driver} on every node"))
    except AscentError as err:
        checks.append(Check("ray versions", "fail", str(err).removeprefix("[cluster] ")))
    return checks


def _torch_check() -> Check:
    try:
        import torch
    except ImportError:
        return Check("torch / CUDA", "fail", "torch is not installed; run scripts/setup.sh")
    if torch.cuda.is_available():
        names = sorted({torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())})
        gpus = f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s): {', '.join(names)}"
        return Check("torch / CUDA", "ok", f"torch {torch.__version__}, {gpus}")
    return Check("torch / CUDA", "ok", f"torch {torch.__version__}, no CUDA GPU: runs use the CPU")


def _version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "present"


def _extras_checks(cfg: Any) -> list[Check]:
    found = {name: _version(mod) for name, (mod, _) in EXTRAS.items()}
    present = [f"{n} {v}" for n, v in found.items() if v]
    absent = [n for n, v in found.items() if not v]
    detail = f"present: {', '.join(present) or 'none'}; absent: {', '.join(absent) or 'none'}"
    checks = [Check("optional extras", "ok", detail)]
    for name, why in _needed_extras(cfg):
        if not found[name]:
            fix = f"{why} needs {name}: pip install '{EXTRAS[name][1]}'"
            checks.append(Check(f"extra {name}", "fail", fix))
    return checks


def _needed_extras(cfg: Any) -> list[tuple[str, str]]:
    """(extra, the config setting that needs it) for what this config asks for."""
    if cfg is None:
        return []
    needs = []
    rollout = getattr(cfg, "rollout", None)
    if getattr(rollout, "engine", None) == "vllm":
        needs.append(("vllm", '[rollout] engine = "vllm"'))
    model = getattr(cfg, "model", None)
    if getattr(getattr(model, "lora", None), "enabled", False):
        needs.append(("peft", "[model.lora] enabled = true"))
    for tracker in getattr(getattr(cfg, "logging", None), "trackers", []):
        needs.append((tracker, f'[logging] trackers = ["{tracker}"]'))
    if getattr(getattr(cfg, "cluster", None), "backend", "local") == "ray":
        needs.append(("ray", '[cluster] backend = "ray"'))
    functions = getattr(getattr(cfg, "reward", None), "functions", [])
    for reward, extra in (
        ("reasoning_gym", "reasoning-gym"),
        ("openenv", "openenv-core"),
        ("verifiers", "verifiers"),
    ):
        if reward in functions:
            needs.append((extra, f'[reward] functions = [..., "{reward}"]'))
    return needs


def _sandbox_check(cfg: Any) -> Check:
    from ascent.config.rewards import SandboxSection
    from ascent.rewards.sandbox.isolation import check_isolation

    name = "sandbox isolation"
    if isinstance(cfg, ClassicConfig):
        return Check(name, "skip", "a classic PPO run executes no generated code")
    section = getattr(cfg, "sandbox", None) or SandboxSection()
    if getattr(section, "unsafe_local", False):
        return Check(name, "warn", "sandbox.unsafe_local = true: programs run WITHOUT isolation")
    try:
        check_isolation(section)
    except AscentError as err:
        return Check(name, "fail", str(err))
    return Check(name, "ok", "bubblewrap starts an isolated sandbox")


def _disk_check(cfg: Any) -> Check:
    run = getattr(cfg, "run", None) or RunSection()  # no config: the default one's
    out = Path(run.output_dir)
    probe = out
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.exists():
        probe = Path.cwd()
    free = shutil.disk_usage(probe).free / 2**30
    detail = f"{free:.1f} GiB free for checkpoints in {out}/"
    if free < DISK_FAIL_GIB:
        return Check("disk space", "fail", detail + "; free space or set [run] output_dir")
    if free < DISK_WARN_GIB:
        return Check("disk space", "warn", detail + "; a 7B checkpoint needs ~15 GiB")
    return Check("disk space", "ok", detail)


async def api_checks(client: ApiClient) -> list[Check]:
    """Keys, endpoints (GET /models, no completion) and each role's model."""
    if not client.roles:
        return [Check("API roles", "skip", "no roles in [models]: API checks skipped")]
    named = ", ".join(f"{role}={spec.model}" for role, spec in client.roles.items())
    checks = [Check("API roles", "ok", named)]
    keys_ok: set[str] = set()
    for var in dict.fromkeys(s.api_key_env for s in client.roles.values()):
        role = next(r for r, s in client.roles.items() if s.api_key_env == var)
        if not var:
            keys_ok.add(var)
            checks.append(Check("key (none)", "ok", "api_key_env is empty: no key is sent"))
            continue
        try:
            secret = client.keys.require(var, role)
        except ApiError as err:
            checks.append(Check(f"key {var}", "fail", str(err)))
            continue
        keys_ok.add(var)
        checks.append(
            Check(f"key {var}", "ok", f"set in the {client.keys.where(var)} ({secret.masked})")
        )
    quick = dataclasses.replace(
        client.policy, timeout_sec=min(client.policy.timeout_sec, DOCTOR_TIMEOUT_SEC), max_retries=0
    )
    probe = ApiClient(client.roles, keys=client.keys, policy=quick, concurrency=client.concurrency)
    endpoints: dict[tuple[str, str], str] = {}
    for role, spec in client.roles.items():
        if spec.api_key_env in keys_ok:
            endpoints.setdefault((spec.base_url, spec.api_key_env), role)
    listed: dict[tuple[str, str], list[str] | None] = {}
    async with probe:
        for (url, var), role in endpoints.items():
            try:
                models = await probe.list_models(role)
            except ApiError as err:
                # a 404 at /models may be an endpoint that lists nothing: smoke decides
                status: Status = "warn" if isinstance(err, BaseUrlError) else "fail"
                checks.append(Check(f"endpoint {url}", status, str(err)))
                listed[(url, var)] = None
                continue
            listed[(url, var)] = models
            checks.append(Check(f"endpoint {url}", "ok", f"reachable, {len(models)} models listed"))
    for role, spec in client.roles.items():
        models = listed.get((spec.base_url, spec.api_key_env))
        if models is None:
            continue
        checks += _model_checks(spec, role, models, quick)
    return checks


def _model_checks(spec: RoleSpec, role: str, models: list[str], policy: RetryPolicy) -> list[Check]:
    out = []
    for model, label in ((spec.model, role), (spec.fallback, f"{role} fallback")):
        if model is None:
            continue
        if model in models:
            out.append(Check(f"model {label}", "ok", f"{model} is listed"))
        else:
            ctx = CallContext(role, model, spec.base_url, spec.api_key_env, policy.max_retries)
            out.append(Check(f"model {label}", "fail", str(unknown_model(ctx, models))))
    return out


def format_checks(checks: list[Check]) -> list[str]:
    width = max(len(c.name) for c in checks)
    marks = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}
    return [f"{marks[c.status]}  {c.name.ljust(width)}  {c.detail}" for c in checks]
