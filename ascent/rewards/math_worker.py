"""A helper process that checks math answers with math-verify.

Started as `python -m ascent.rewards.math_worker` by `ascent.rewards.math.MathVerifier`.

math-verify's own time limits use SIGALRM, which only works on a main thread, so the checks
run here, on this process's main thread, and the parent (`ascent.rewards.math.MathVerifier`)
adds an outer limit: a check that hangs past it gets this process killed and replaced.

Protocol: one JSON object per line on stdin, {"gold": str, "prediction": str, "timeout": int};
one per line on stdout, {"outcome": "equal" | "not_equal" | "gold_unparsed" |
"prediction_unparsed" | "timeout" | "error", "error"?: str}.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def wrap_latex(text: str) -> str:
    """Put a raw answer between math delimiters: math-verify finds LaTeX only inside them."""
    stripped = text.strip()
    if stripped.startswith(("$", "\\(", "\\[")) or "\\boxed" in stripped:
        return stripped
    return f"${stripped}$"


def check(gold: str, prediction: str, timeout: int) -> dict[str, Any]:
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    try:
        parsed_gold = parse(wrap_latex(gold), parsing_timeout=timeout, raise_on_error=True)
        if not parsed_gold:
            return {"outcome": "gold_unparsed"}
        parsed_pred = parse(wrap_latex(prediction), parsing_timeout=timeout, raise_on_error=True)
        if not parsed_pred:
            return {"outcome": "prediction_unparsed"}
        equal = verify(parsed_gold, parsed_pred, timeout_seconds=timeout, raise_on_error=True)
    except TimeoutException:
        return {"outcome": "timeout"}
    except Exception as err:  # a sympy failure on one odd answer must not stop the batch
        return {"outcome": "error", "error": f"{type(err).__name__}: {err}"[:500]}
    return {"outcome": "equal" if equal else "not_equal"}


def main() -> None:
    import math_verify  # noqa: F401  (import before announcing readiness: the slow part)

    sys.stdout.write('{"ready": true}\n')
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        reply = check(request["gold"], request["prediction"], request["timeout"])
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
