"""`ascent train CONFIG --dry-run`: everything a run needs, resolved and checked, no training.

What a run would find only after minutes of loading, or hours in, is checked in seconds and
reported together, one line per problem with its fix:

    config        loads (its warnings shown); what it leaves to the built-in defaults (a
                  config file that names no model trains the tiny demo model, one that names
                  no data the arithmetic task: said, never silent)
    model         the policy's tokenizer and config.json resolve (a hub id, a directory or a
                  built-in name; a loose name such as `qwen-32b` gets the hub id it means)
    data          the task loads, with the columns its rewards read (`tests` for code,
                  `answer` for math, `numbers` and `target` for countdown)
    keys          every API role's key variable is set (in the environment or the .env)
    ranks         the batch arithmetic holds on --nproc N ranks
    prompts       every prompt fits the model's context beside max_new_tokens
    memory        the estimated peak memory (parameters, optimiser, activations, KV cache)
                  fits this machine
    extras, sandbox   what the config needs is installed; code runs isolated
    run directory     can be written (not there, or --overwrite / --resume given)

Nothing is written and no weight is loaded beyond config.json and the tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from ascent.api.client import ApiClient
from ascent.api.diagnoses import ApiError
from ascent.configfile.loader import BUILTIN_SOURCE
from ascent.data import first_of_each_source, load_task, reward_columns, uses_chat_template
from ascent.doctor.checks import Check, environment_checks
from ascent.errors import AscentError, one_line
from ascent.models import load_tokenizer
from ascent.rewards import REWARDS
from ascent.rules import ClassicConfig, LLMConfig

_TINY = "ascent:tiny"  # the model a config that names none trains


def dry_run(
    cfg: LLMConfig | ClassicConfig,
    nproc: int = 1,
    *,
    resume: Path | None = None,
    overwrite: bool = False,
) -> list[Check]:
    """Every check of a run of `cfg` on `nproc` ranks; a failing one never stops the rest."""
    checks = [Check("config", "ok", f"{cfg.source}: valid ({_kind(cfg)} run)")]
    checks += [Check("config", "warn", w) for w in cfg.warnings]
    if isinstance(cfg, LLMConfig):
        checks += _defaults(cfg)
        checks += _llm_checks(cfg, nproc)
    else:
        checks.append(_env_check(cfg))
        if nproc > 1:
            checks.append(Check("ranks", "fail", "--nproc runs LLM recipes; drop it"))
    checks += environment_checks(cfg)  # python, torch, extras the config needs, sandbox, disk
    checks.append(_keys_check(cfg))
    checks.append(_run_dir_check(cfg, resume, overwrite))
    return checks


def _kind(cfg: object) -> str:
    return "classic PPO" if isinstance(cfg, ClassicConfig) else "LLM"


def _defaults(cfg: LLMConfig) -> list[Check]:
    """A config file that leaves the model or the data to the demo defaults, said aloud."""
    if cfg.source in (None, BUILTIN_SOURCE):
        return []  # the built-in demo: its defaults are the point
    out = []
    if not cfg.model.explicitly_set("name_or_path"):
        out.append(Check("model", "warn", f"the config names no model: [model] name_or_path is "
                         f"the built-in {_TINY} (1 M parameters, a demo); set it to your policy's "
                         "hub id or directory"))  # fmt: skip
    data = cfg.data
    if not (data.sources or data.explicitly_set("path") or data.explicitly_set("task")):
        out.append(Check("data", "warn", f"the config names no data: the built-in "
                         f"'{data.task}' task trains; set [data] path (a JSONL / Parquet file, a "
                         "datasets directory or an ascent: set) or [data] task"))  # fmt: skip
    return out


def _llm_checks(cfg: LLMConfig, nproc: int) -> list[Check]:
    from ascent.train import check_world_size

    checks = []
    tokenizer = None
    name = cfg.model.name_or_path
    try:
        tokenizer = load_tokenizer(cfg.model)
        checks.append(Check("model", "ok", f"{name}: tokenizer and config resolve"))
    except AscentError as err:  # a loose name gets the hub id it means (models.loading)
        checks.append(Check("model", "fail", str(err)))
    task = None
    try:
        task = load_task(cfg.data, cfg.run.seed)
        checks.append(_columns_check(cfg, task))
    except AscentError as err:
        checks.append(Check("data", "fail", str(err)))
    try:
        check_world_size(cfg, nproc)
        per_rank = cfg.train.batch_size // nproc
        checks.append(
            Check("ranks", "ok", f"{nproc} rank(s), {per_rank} completions each per step")
        )
    except AscentError as err:
        checks.append(Check("ranks", "fail", str(err)))
    if tokenizer is not None and task is not None:
        checks.append(_prompts_check(cfg, tokenizer, task))
        checks.append(_memory_check(cfg, nproc, tokenizer, task))
    return checks


def _columns_check(cfg: LLMConfig, task) -> Check:
    """The task's rows carry what its rewards read."""
    rows = first_of_each_source(task.train, 256)
    columns = reward_columns(rows)
    missing = []
    for fn in cfg.reward.functions:
        if fn not in REWARDS:
            continue  # a custom callable: it says what it reads when it runs
        for column in REWARDS.meta(fn).get("columns", ()):
            if not any(v is not None for v in columns.get(column, [])):
                missing.append((fn, column))
    counts = f"{len(task.train)} train / {len(task.eval)} held-out problems"
    if missing:
        fn, column = missing[0]
        have = ", ".join(sorted(k for k, v in columns.items() if any(x is not None for x in v)))
        return Check("data", "fail", f"the {fn} reward reads a '{column}' column and the "
                     f"data has none ({counts}; columns with values: {have or 'none'}); add it "
                     "or choose [reward] functions that fit the data")  # fmt: skip
    return Check("data", "ok", counts)


def _prompts_check(cfg: LLMConfig, tokenizer, task) -> Check:
    from ascent.train.llm_preflight import check_prompts

    try:
        check_prompts(cfg, tokenizer, task, uses_chat_template(cfg.data.chat_template, tokenizer))
    except AscentError as err:
        return Check("prompts", "fail", str(err))
    return Check("prompts", "ok", "every prompt fits the context beside max_new_tokens")


def _memory_check(cfg: LLMConfig, nproc: int, tokenizer, task) -> Check:
    from ascent.models.memory import available_mib
    from ascent.runtime import resolve_device
    from ascent.train.distributed import Dist
    from ascent.train.llm_preflight import check_memory

    device = resolve_device(cfg.run.device)
    try:
        chat = uses_chat_template(cfg.data.chat_template, tokenizer)
        estimate = check_memory(cfg, Dist(0, nproc, device), tokenizer, task, chat)
    except AscentError as err:
        return Check("memory", "fail", str(err))
    if estimate is None:
        why = "agentic rows grow with the episode" if cfg.agentic.enabled else "no config.json"
        return Check("memory", "skip", f"no estimate ({why})")
    available = available_mib(device)
    ranks = nproc if device.type == "cpu" else 1
    of = f" of {available:,.0f} MiB available" if available is not None else ""
    per = f" ({ranks} ranks x {estimate.total:,.0f})" if ranks > 1 else ""
    return Check("memory", "ok", f"estimated peak {estimate.total * ranks:,.0f} MiB{per}{of}")


def _env_check(cfg: ClassicConfig) -> Check:
    """The classic run's vector environment can be made as the trainer makes it."""
    from ascent.train.classic_rollout import make_vector_env

    try:
        envs = make_vector_env(cfg.env)
    except AscentError as err:
        return Check("environment", "fail", str(err))
    try:
        space = envs.single_observation_space
        return Check("environment", "ok", f"{cfg.env.id} x {cfg.env.num_envs}: {space}")
    finally:
        envs.close()


def _keys_check(cfg: LLMConfig | ClassicConfig) -> Check:
    """Every API role's key variable is set (nothing is sent: `ascent doctor` calls the
    endpoints, `ascent smoke` the models)."""
    if isinstance(cfg, ClassicConfig) and not cfg.assistant.enabled:
        return Check("keys", "skip", "no API role (the log assistant is off)")
    try:
        client = ApiClient.from_config(cfg)
    except AscentError as err:
        return Check("keys", "fail", str(err))
    if not client.roles:
        return Check("keys", "skip", "no API role in [models]")
    found, missing = [], []
    for var in dict.fromkeys(s.api_key_env for s in client.roles.values()):
        role = next(r for r, s in client.roles.items() if s.api_key_env == var)
        if not var:
            continue
        try:
            found.append(f"{var} ({client.keys.require(var, role).masked})")
        except ApiError as err:
            missing.append(one_line(str(err)))
    if missing:
        return Check("keys", "fail", missing[0])
    return Check("keys", "ok", ", ".join(found) or "the roles' endpoints take no key")


def _run_dir_check(cfg: LLMConfig | ClassicConfig, resume: Path | None, overwrite: bool) -> Check:
    from ascent.rundir import RunDir

    try:
        return Check("run directory", "ok", RunDir.check(cfg, resume=resume, overwrite=overwrite))
    except AscentError as err:
        return Check("run directory", "fail", str(err))
