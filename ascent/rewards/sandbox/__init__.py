"""Run model-written programs in isolation: `run_program` for one, `SandboxPool` for batches.

Modules, one job each: `isolation` (how a worker is confined), `uids` (the uids runs use as
root, held host-wide), `cgroups` (one memory and process limit for all of a run's processes),
`limits` (what a run may use and how its outcome becomes a status), `worker` (the host's
connection to one zygote), `pool` (parallel workers, futures). `inside/` holds what runs in the
sandbox: the zygote (the warm interpreter that forks each run), the run's own set-up, the
system-call filter and call-a-function tests, which run apart from the program.
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
