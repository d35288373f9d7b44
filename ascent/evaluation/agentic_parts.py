"""The parts an agentic evaluation builds its episodes from (`ascent.evaluation.agentic`).

- `EvalFormat`: the code format, with the problem text cut and, for small-context models, no
  role instructions.
- `EvalApiRoles`: API roles whose failed requests are recorded on their episode.
- `local_roles`: the local policy behind the "policy" roles, its turns batched.
- `CharEstimate`: the transcript's length when no local tokenizer is loaded.
- `check_agentic_eval`, `episode_problems`: what is refused before anything is loaded, and
  the problems as the episode runner reads them.
- `make_runner`: the episode runner from these parts and the config.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ascent.api import ApiClient, ApiError
from ascent.api.failures import FATAL_ERRORS
from ascent.data import Problem
from ascent.data.code_problems import CodeProblem, read_jsonl
from ascent.errors import ConfigError
from ascent.evaluation.policy import EndpointFailed
from ascent.evaluation.problem_set import ProblemSet
from ascent.rewards.code import language_name
from ascent.rewards.sandbox import SandboxPool
from ascent.rollout.agentic.episode import EpisodeRunner, EpisodeSettings, reference_users
from ascent.rollout.agentic.formats import CodeFormat
from ascent.rollout.agentic.roles import ApiRoles, PolicyBatcher
from ascent.rollout.agentic.verify import Verifier
from ascent.rules import LLMConfig
from ascent.rules.roles import named_roles

CHARS_PER_TOKEN = 4  # the transcript's length in tokens when no local tokenizer is loaded
# The failed API requests of the episode running in the current task: (role, diagnosis).
EPISODE_ERRORS: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
    "ascent_episode_api_errors", default=None
)


class EvalFormat(CodeFormat):
    """The code format, with the problem text roles read cut to `max_chars` (0: never) and,
    without `instructions`, no built-in role instructions (for small-context models)."""

    def __init__(self, instructions: bool, max_chars: int) -> None:
        self.instructions = instructions
        self.max_chars = max_chars

    def problem_text(self, code: CodeProblem) -> str:
        """The problem as every role reads it (its statement and sample tests), cut."""
        text = super().problem_text(code)
        return text[: self.max_chars] if self.max_chars else text

    def cut(self, code: CodeProblem) -> bool:
        return bool(self.max_chars) and len(super().problem_text(code)) > self.max_chars

    def header(self, role: str, code: CodeProblem) -> str:
        return super().header(role, code) if self.instructions else self.problem_text(code)

    def messages(self, role: str, code: CodeProblem, events: list[Any]) -> list[dict[str, Any]]:
        chat = super().messages(role, code, events)
        return chat if self.instructions else chat[1:]  # without the system message


class CharEstimate:
    """Stands in for a tokenizer when no local policy is loaded: CHARS_PER_TOKEN characters a
    token. It only measures the transcript against summarize_threshold and sizes scripted
    turns; nothing is decoded with it."""

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [0] * -(-len(text) // CHARS_PER_TOKEN)}


class EvalApiRoles(ApiRoles):
    """API roles whose failed requests are recorded on the episode that made them, with the
    fix for a prompt over the model's limit; a failure every request would hit stops the
    evaluation (`EndpointFailed`)."""

    def __init__(
        self, client: ApiClient, params: dict[str, Any], report: Callable[[str], None]
    ) -> None:
        super().__init__(client, params)
        self.report = report

    async def generate(self, role: str, messages: list[dict[str, Any]]) -> tuple[str, int, str]:
        try:
            result = await self.client.chat(role, messages, **self.params)
        except FATAL_ERRORS as err:
            raise EndpointFailed(f"stopping the evaluation: {err}") from None
        except ApiError as err:
            error = str(err)
        else:
            return result.text, result.completion_tokens, ""
        errors = EPISODE_ERRORS.get()
        if errors is not None:
            errors.append((role, error))
        self.report(f"{role}: {error}")
        return "", 0, f"api error: {error}"


@dataclass
class LocalRoles:
    """The local policy that plays the "policy" roles."""

    batcher: PolicyBatcher
    tokenizer: Any
    max_context: int | None  # the model's context length, when it says
    info: dict[str, Any]


@contextlib.contextmanager
def local_roles(
    cfg: LLMConfig, run_dir: Path | None, checkpoint: Path | None
) -> Iterator[LocalRoles]:
    """Load the policy ([eval] policy = "local") and batch its turns on an engine of its own."""
    import torch

    from ascent.evaluation.policy import load_local_policy
    from ascent.rollout.sampling import SamplingParams
    from ascent.rollout.transformers_engine import TransformersEngine
    from ascent.train.llm_setup import eos_ids

    ev = cfg.eval
    policy = load_local_policy(cfg, run_dir, checkpoint)
    tokenizer = policy.tokenizer
    eos = eos_ids(policy.model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    engine = TransformersEngine(policy.model, pad_id=pad, eos_ids=eos)
    greedy = ev.temperature == 0
    sampling = SamplingParams(
        ev.max_new_tokens,
        temperature=1.0 if greedy or ev.temperature is None else ev.temperature,
        top_p=ev.top_p or 1.0,
        greedy=greedy,
    )
    generator = torch.Generator(device=policy.device).manual_seed(cfg.run.seed)
    batcher = PolicyBatcher(engine, tokenizer, sampling, generator, cfg.rollout.async_workers)
    info = {"model": policy.source, "device": str(policy.device)}
    try:
        yield LocalRoles(batcher, tokenizer, policy.max_context, info)
    finally:
        batcher.close()


def check_agentic_eval(cfg: LLMConfig, roles: dict[str, str], checkpoint: Path | None) -> None:
    """Refuse role settings the evaluation cannot honour, before any model or request."""
    ev = cfg.eval
    policy_roles = [role for role, source in roles.items() if source == "policy"]
    if policy_roles and ev.policy == "api":
        raise ConfigError(
            f'[agentic.roles] {policy_roles[0]} = "policy": with [eval] policy = "api" no '
            'local policy is loaded; set [eval] policy = "local", or serve the role from '
            f'[models] ({policy_roles[0]} = "api")'
        )
    if not policy_roles and checkpoint is not None:
        raise ConfigError(
            '--checkpoint loads a local policy, and no [agentic.roles] role is "policy"; '
            'set e.g. solver = "policy", or drop --checkpoint'
        )
    named = {role for role, (model, _) in named_roles(cfg.models).items() if model}
    for role, source in roles.items():
        if source == "api" and role not in named:
            raise ConfigError(
                f'[agentic.roles] {role} = "api" needs a model: add {role}_model = "name" to '
                f'[models], or set {role} = "scripted" or "off"'
            )


def _reference_languages(problem_set: ProblemSet) -> dict[str, str]:
    """The `reference_language` column of each code-schema row that has one, by problem id
    (code_contests and HumanEval rows carry none: no reference solution, or a function)."""
    if problem_set.format != "code":
        return {}
    stem = problem_set.path.name.split(".")[0]
    found = {}
    for number, row in read_jsonl(problem_set.path):
        if row.get("reference_language"):
            key = row.get("id")
            found[str(key) if key not in (None, "") else f"{stem}:{number}"] = str(
                row["reference_language"]
            )
    return found


def episode_problems(problem_set: ProblemSet, roles: dict[str, str]) -> list[Problem]:
    """Each code problem as the episode runner reads it (its reference solution's language
    in the `reference_language` column); refused where an episode could not run."""
    if problem_set.kind != "code":
        raise ConfigError(
            f'[eval] mode = "agentic": {problem_set.path.name} holds math problems, and '
            'episodes judge programs; use mode = "single" or a code problem file'
        )
    languages = _reference_languages(problem_set)
    users = reference_users(roles)
    out = []
    for code in problem_set.problems:
        assert isinstance(code, CodeProblem)
        language = languages.get(code.id)
        runs_reference = users and code.reference_solution and not code.is_function
        if runs_reference and not language:
            why, fix = (
                ("confirms generated tests", 'set [agentic.roles] testgen = "off"')
                if users[0] == "testgen"
                else ("is the scripted solver's answer", 'set [agentic.roles] solver = "policy"')
            )
            raise ConfigError(
                f"problem {code.id}: its reference solution (which {why}) has no "
                f"reference_language; add the column (python or cpp) to the rows, or {fix}"
            )
        if runs_reference:
            language_name(language, f"problem {code.id}: reference_language")
        columns = {"code_problem": code, "reference_language": language}
        out.append(Problem(key=code.id, prompt=code.statement, answer="", columns=columns))
    return out


def make_runner(
    cfg: LLMConfig,
    roles: dict[str, str],
    pool: SandboxPool,
    local: LocalRoles | None,
    api: ApiRoles | None,
) -> EpisodeRunner:
    """The episode runner: `[agentic]` turns and thresholds, `[eval]` sampling and language,
    `[reward.code]` and `[sandbox]` for the verifier; the local policy's context length caps
    context_window."""
    a, ev = cfg.agentic, cfg.eval
    window = a.context_window
    if local is not None and local.max_context:
        window = min(window, local.max_context)
    settings = EpisodeSettings(
        roles=roles,
        max_turns=a.max_turns,
        summarize_threshold=a.summarize_threshold,
        context_window=window,
        max_new_tokens=ev.max_new_tokens,
        adversarial_penalty=a.adversarial_penalty,
        unparsable_reward=a.unparsable_reward,
        max_generated_tests=a.max_generated_tests,
        default_language=ev.language,
    )
    fmt = EvalFormat(ev.role_instructions, ev.max_problem_chars)
    verifier = Verifier(pool, cfg.reward.code, cfg.sandbox)
    if local is None:
        return EpisodeRunner(settings, fmt, verifier, CharEstimate(), None, api)  # type: ignore[arg-type]
    from ascent.data import uses_chat_template
    from ascent.rollout.agentic.chat import ChatTemplate

    tokenizer = local.tokenizer
    chat = None
    if uses_chat_template(cfg.data.chat_template, tokenizer):  # decided as the trainer does
        chat = ChatTemplate(tokenizer)
    return EpisodeRunner(settings, fmt, verifier, tokenizer, local.batcher, api, chat)
