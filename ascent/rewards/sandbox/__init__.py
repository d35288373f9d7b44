"""Run model-written programs in isolation: `run_program` for one, `SandboxPool` for batches.

Modules, one job each: `isolation` (how a worker is confined), `limits` (what a run may use and
how its outcome becomes a status), `zygote` (the warm interpreter inside the sandbox that forks
each run), `worker` (the host's connection to one zygote), `pool` (parallel workers, futures).
"""

from ascent.rewards.sandbox.isolation import check_isolation
from ascent.rewards.sandbox.limits import STATUSES, Limits, RunResult, Status
from ascent.rewards.sandbox.pool import SandboxPool, pool_size, run_program
from ascent.rewards.sandbox.worker import LANGUAGES, Program, Worker

__all__ = [
    "LANGUAGES",
    "STATUSES",
    "Limits",
    "Program",
    "RunResult",
    "SandboxPool",
    "Status",
    "Worker",
    "check_isolation",
    "pool_size",
    "run_program",
]
