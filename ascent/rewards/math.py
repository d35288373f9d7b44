"""The math reward: extract the final answer, compare it with the gold by equivalence.

Extraction: the last `\\boxed{...}` (nested braces allowed), or the last match of a configured
pattern whose group matched; failing that, "the answer is X" unless switched off: the last one
that names a number or some mathematics (a later "verify whether the answer is correct" is not
an answer). Gold answers may be plain ("42", "\\frac{1}{2}", "[0,1)") or GSM8K solutions ending
in "#### 42". Plain numbers may group their thousands with ",", "\\," or "{,}".

Equivalence is math-verify's (fractions, LaTeX, sets, intervals, percent, units in \\text{}),
run in helper processes (`MathVerifier`) so that its signal-based timeouts work and a batch can
be checked from any thread; a check that overruns is killed and scored wrong. Two plain
numbers are compared directly, without a helper process.
"""

from __future__ import annotations

import atexit
import functools
import json
import math as _math
import os
import queue
import re
import select
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal, InvalidOperation
from typing import Any

from ascent.config.rewards import MathRewardSection, RewardSection, SandboxSection
from ascent.errors import AscentError
from ascent.rewards.base import REWARDS, Scored, ScoredReward, column, completion_text

START_TIMEOUT_S = 60.0

# -- extraction ------------------------------------------------------------------------------

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_ANSWER_IS = re.compile(r"answer\s+is\s*:?\s*", re.IGNORECASE)
_GSM8K_GOLD = "####"
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")
_MATHS = re.compile(r"\d|\\[a-zA-Z]+|[\^=π∞√]")  # a digit, a LaTeX command, an operator


def extract_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` (balanced braces) or `\\boxed x`; None if absent."""
    for match in reversed(list(_BOXED.finditer(text))):
        start = match.end()
        if start < len(text) and text[start] == "{":
            depth = 0
            for i in range(start, len(text)):
                if text[i] == "{" and text[i - 1] != "\\":
                    depth += 1
                elif text[i] == "}" and text[i - 1] != "\\":
                    depth -= 1
                    if depth == 0:
                        return text[start + 1 : i].strip()
            continue  # unbalanced: a truncated completion; try an earlier box
        token = re.match(r"[^\s$]+", text[start:])
        if token:
            return token.group(0).rstrip(".")
    return None


def _answer_is(text: str) -> str | None:
    """What follows the last "answer is" that names some mathematics, else the last one."""
    found = [_after(text, match.end()) for match in _ANSWER_IS.finditer(text)]
    found = [answer for answer in found if answer]
    mathematical = [answer for answer in found if _MATHS.search(answer)]
    return (mathematical or found or [None])[-1]


def _after(text: str, start: int) -> str | None:
    rest = text[start:].split("\n", 1)[0].strip()
    boxed = extract_boxed(rest)
    if boxed is not None:
        return boxed
    rest = re.sub(r"\.(\s.*)?$", "", rest)  # the sentence ends at a period and a space or the end
    rest = rest.strip().strip("*").strip()
    for left, right in (("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if rest.startswith(left) and rest.endswith(right) and len(rest) > len(left) + len(right):
            rest = rest[len(left) : -len(right)].strip()
    return rest or None


def extract_answer(text: str, pattern: str = "", answer_is_fallback: bool = True) -> str | None:
    """The final answer in a completion, or None.

    `pattern`: a regex whose first group is the answer (its last match in which the group took
    part wins); empty: the last `\\boxed{...}`. `answer_is_fallback`: when that finds nothing,
    take "the answer is X".
    """
    if pattern:
        groups = [m.group(1) for m in re.finditer(pattern, text)]
        found = next((g.strip() for g in reversed(groups) if g is not None and g.strip()), None)
    else:
        found = extract_boxed(text)
    if found:
        return found
    return _answer_is(text) if answer_is_fallback else None


def parse_gold(answer: Any) -> str:
    """The gold answer as text: the part after GSM8K's `####`, a boxed answer, or as given."""
    text = str(answer).strip()
    if _GSM8K_GOLD in text:
        return _THOUSANDS.sub("", text.rsplit(_GSM8K_GOLD, 1)[1].strip())
    boxed = extract_boxed(text)
    return boxed if boxed is not None else text


def _as_number(text: str) -> Decimal | None:
    cleaned = text.strip().replace("\\!", "").replace("\\,", "").replace("{,}", ",")
    cleaned = _THOUSANDS.sub("", cleaned).rstrip(".")
    if cleaned.startswith(("\\$", "$")):
        cleaned = cleaned.lstrip("\\$")
    if not _PLAIN_NUMBER.fullmatch(cleaned):
        return None
    try:
        return Decimal(cleaned)
    except InvalidOperation:  # pragma: no cover - the regex admits only valid decimals
        return None


def compare_numbers(gold: str, prediction: str) -> str | None:
    """'equal' / 'not_equal' when both are plain numbers and that settles it, else None.

    Only decides what math-verify would decide the same way: equal values, or two different
    integers (different decimals may still agree after math-verify's rounding).
    """
    a, b = _as_number(gold), _as_number(prediction)
    if a is None or b is None:
        return None
    if a == b:
        return "equal"
    if a == a.to_integral_value() and b == b.to_integral_value():
        return "not_equal"
    return None


# -- checking in helper processes ------------------------------------------------------------


class _VerifierProcess:
    """One `python -m ascent.rewards.math_worker` process."""

    args: tuple[str, ...] = ("-m", "ascent.rewards.math_worker")

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None

    def check(self, gold: str, prediction: str, timeout_s: float) -> dict[str, Any]:
        self._ensure_started()
        assert self._proc is not None and self._proc.stdin is not None
        seconds = max(1, _math.ceil(timeout_s))
        request = {"gold": gold, "prediction": prediction, "timeout": seconds}
        try:
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
            # math-verify limits parsing gold, parsing the prediction and verifying separately.
            line = self._readline(3 * seconds + 2)
        except (OSError, TimeoutError) as err:
            self.stop()
            return {"outcome": "timeout", "error": str(err)}
        return json.loads(line)

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        self._proc = subprocess.Popen(
            [sys.executable, *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        try:
            self._readline(START_TIMEOUT_S)
        except (OSError, TimeoutError) as err:
            self.stop()
            raise AscentError(
                f"the math checker process did not start ({err}); is math-verify installed? "
                "(pip install math-verify)"
            ) from None

    def _readline(self, timeout_s: float) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout_s)
        if not ready:
            raise TimeoutError(f"no answer within {timeout_s:.0f} s")
        line = self._proc.stdout.readline()
        if not line:
            raise OSError("the math checker process exited")
        return line

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()


class MathVerifier:
    """Checks (gold, prediction) pairs with math-verify in `workers` helper processes.

    Thread-safe. Each check has its own time limit; a helper that overruns it is killed and
    replaced, and that pair counts as 'timeout'.
    """

    def __init__(self, workers: int, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._procs = [_VerifierProcess() for _ in range(workers)]
        self._idle: queue.SimpleQueue[_VerifierProcess] = queue.SimpleQueue()
        for proc in self._procs:
            self._idle.put(proc)
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="ascent-math")
        self._lock = threading.Lock()
        self._closed = False
        self._at_exit = functools.partial(_close_quietly, weakref.ref(self))
        atexit.register(self._at_exit)

    def check(self, gold: str, prediction: str) -> dict[str, Any]:
        quick = compare_numbers(gold, prediction)
        if quick is not None:
            return {"outcome": quick}
        proc = self._idle.get()
        try:
            return proc.check(gold, prediction, self.timeout_s)
        finally:
            self._idle.put(proc)

    def check_many(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        return list(self._executor.map(lambda pair: self.check(*pair), pairs))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        atexit.unregister(self._at_exit)
        self._executor.shutdown(wait=True)
        for proc in self._procs:
            proc.stop()


def _close_quietly(ref: weakref.ref[Any]) -> None:
    obj = ref()
    if obj is not None:
        obj.close()


# -- the reward ------------------------------------------------------------------------------


class MathReward(ScoredReward):
    """`f(prompts, completions, answer, **columns)`; rows whose `answer` is None score None."""

    def __init__(self, cfg: MathRewardSection) -> None:
        self.cfg = cfg
        self.verifier = MathVerifier(cfg.workers, cfg.timeout_s)

    def score(self, prompts: list[Any], completions: list[Any], **columns: list[Any]) -> Scored:
        golds = column(columns, "answer", len(completions), "math")
        cfg = self.cfg
        extracted = [
            extract_answer(completion_text(c), cfg.answer_pattern, cfg.answer_is_fallback)
            for c in completions
        ]
        todo = [
            i
            for i, (g, e) in enumerate(zip(golds, extracted, strict=True))
            if g is not None and e is not None
        ]
        parsed = {i: parse_gold(g) for i, g in enumerate(golds) if g is not None}
        outcomes = dict(
            zip(
                todo,
                self.verifier.check_many([(parsed[i], extracted[i]) for i in todo]),
                strict=True,
            )
        )
        values: list[float | None] = []
        details: list[dict[str, Any]] = []
        for i, (gold, answer) in enumerate(zip(golds, extracted, strict=True)):
            outcome = outcomes.get(i, {}).get("outcome")
            if gold is None:
                outcome = "no_gold"
            elif answer is None:
                outcome = "no_answer"
            values.append(self._value(outcome))
            detail = {"extracted": answer, "gold": parsed.get(i), "outcome": outcome}
            detail["correct"] = outcome == "equal"
            if "error" in outcomes.get(i, {}):
                detail["error"] = outcomes[i]["error"]
            details.append(detail)
        return Scored(values, details)

    def _value(self, outcome: str) -> float | None:
        cfg = self.cfg
        missing = cfg.wrong_reward if cfg.missing_reward is None else cfg.missing_reward
        if outcome in ("no_gold", "gold_unparsed"):
            return None  # the data, not the completion, is at fault: not applicable
        if outcome == "equal":
            return cfg.correct_reward
        if outcome in ("no_answer", "prediction_unparsed"):
            return missing
        return cfg.wrong_reward

    def close(self) -> None:
        self.verifier.close()


@REWARDS.register("math", columns=("answer",))
def build_math_reward(reward_cfg: RewardSection, sandbox_cfg: SandboxSection) -> MathReward:
    return MathReward(reward_cfg.math)


_default: MathReward | None = None
_default_lock = threading.Lock()


def math_reward(
    prompts: list[Any], completions: list[Any], **columns: list[Any]
) -> list[float | None]:
    """The math reward with the default `[reward.math]` settings, as a plain TRL function."""
    global _default
    with _default_lock:
        if _default is None:
            _default = MathReward(MathRewardSection())
    return _default(prompts, completions, **columns)
