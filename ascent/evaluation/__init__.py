"""`ascent eval` for LLM policies: a local or API policy on a problem set, pass@k by band.

- `passk`: unbiased pass@k (Chen et al. 2021).
- `bands`: which table row a problem belongs to (rating band, else difficulty label).
- `problem_set`: the file, its format (code_contests, HumanEval, ascent's code schema, math)
  and the prompts.
- `policy`: the policy behind one OpenAI-compatible interface; which failures are fatal.
- `scoring`: each sample judged by the sandboxed code judge or the math checker.
- `harness`: the event loop that keeps requests in flight and judges as answers arrive.
- `results` / `table`: eval_results.json, transcripts.jsonl and the printed table.
"""

from ascent.evaluation.bands import Band, band_of
from ascent.evaluation.harness import EvalRun, output_dir, run_eval
from ascent.evaluation.passk import mean_pass_at_k, pass_at_k
from ascent.evaluation.policy import EndpointFailed, Sample
from ascent.evaluation.problem_set import MathProblem, ProblemSet, load_problem_set
from ascent.evaluation.results import RESULTS_FILE, TRANSCRIPTS_FILE, ProblemResult
from ascent.evaluation.table import print_summary, results_table

__all__ = [
    "RESULTS_FILE",
    "TRANSCRIPTS_FILE",
    "Band",
    "EndpointFailed",
    "EvalRun",
    "MathProblem",
    "ProblemResult",
    "ProblemSet",
    "Sample",
    "band_of",
    "load_problem_set",
    "mean_pass_at_k",
    "output_dir",
    "pass_at_k",
    "print_summary",
    "results_table",
    "run_eval",
]
