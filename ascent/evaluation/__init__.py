"""`ascent eval` for LLM policies: a local or API policy on a problem set, pass@k by band.

- `passk`: unbiased pass@k (Chen et al. 2021).
- `bands`: which table row a problem belongs to (rating band, else difficulty label), and
  with `only_bands` which problems are evaluated at all.
- `problem_set`: the file, its format (code_contests, HumanEval, ascent's code schema, math)
  and the prompts.
- `policy`: the policy behind one OpenAI-compatible interface; which failures are fatal.
- `scoring`: each sample judged by the sandboxed code judge or the math checker.
- `harness`: the event loop that keeps requests in flight and judges as answers arrive.
- `results` / `table`: eval_results.json, transcripts.jsonl and the printed table.
- `agentic` (`agentic_parts`, `agentic_results`): `[eval] mode = "agentic"`, one multi-role
  episode per problem, pass at the first attempt and after feedback, per role what it made.
- `test_time_run` (`test_time_setup`, `test_time_scoring`, `test_time_rl`, `test_time_results`):
  `[eval.test_time_rl]`, a few GRPO updates per problem on the policy's own attempts, scored
  on visible tests only, before it answers; pass@1 without and with on the same problems.
"""

from ascent.evaluation.agentic_results import AgenticRun, EpisodeResult
from ascent.evaluation.bands import Band, Skipped, band_of, in_bands
from ascent.evaluation.harness import EvalRun, run_eval
from ascent.evaluation.passk import mean_pass_at_k, pass_at_k
from ascent.evaluation.policy import EndpointFailed, Sample
from ascent.evaluation.problem_set import MathProblem, ProblemSet, load_problem_set
from ascent.evaluation.results import RESULTS_FILE, TRANSCRIPTS_FILE, ProblemResult, output_dir
from ascent.evaluation.table import print_summary, results_table

__all__ = [
    "RESULTS_FILE",
    "TRANSCRIPTS_FILE",
    "AgenticRun",
    "Band",
    "EndpointFailed",
    "EpisodeResult",
    "EvalRun",
    "MathProblem",
    "ProblemResult",
    "ProblemSet",
    "Sample",
    "Skipped",
    "band_of",
    "in_bands",
    "load_problem_set",
    "mean_pass_at_k",
    "output_dir",
    "pass_at_k",
    "print_summary",
    "results_table",
    "run_eval",
]
