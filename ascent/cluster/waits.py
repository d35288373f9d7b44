"""Calls on Ray actors that Ray may be restarting, waited out by time, not by counts.

Ray answers a call on an actor it is restarting with `ActorUnavailableError`, as often as it
is asked, until the new incarnation is up, which on a busy machine takes seconds; a count of
quick retries runs out long before (the suite failed that way with other jobs on the cores).
A call on an actor that died for good (its `max_restarts` used up) fails with
`ActorDiedError` at once, every time; so does the task that was running when an actor died,
even one Ray will restart. Hence: "unavailable" is waited out until the call's deadline, and
only an actor that keeps answering "died" for `DEAD_AFTER_S` is taken to be gone.

Starting an actor (a process, torch, a model) is not answering a call: on a busy machine it
took over a minute. So a new actor's first answer (`wait_ready`), and a call that meets a
restart, get `[cluster] startup_timeout_sec`; a call to a running actor gets `timeout_sec`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from ascent.errors import AscentError

DEAD_AFTER_S = 5.0  # "died" on every try for this long: dead for good
FIRST_PAUSE_S, LONGEST_PAUSE_S = 0.1, 1.0


class ActorGone(Exception):
    """The actor died and Ray will not restart it."""


class NoAnswer(Exception):
    """The call was not answered before its deadline."""


def wait_ready(ray: Any, actors: list[Any], timeout_s: float, what: str) -> None:
    """Wait until every one of `actors` (each with a `ready()` method) has started, within
    `timeout_s` ([cluster] startup_timeout_sec); else one line saying what to change."""
    from ray.exceptions import RayActorError

    deadline = time.monotonic() + timeout_s
    for actor in actors:
        left = max(deadline - time.monotonic(), 0.001)
        try:
            get_through_restarts(ray, actor.ready.remote(), actor.ready.remote, left, 0.0)
        except NoAnswer:
            raise AscentError(
                f"{what} did not start within [cluster] startup_timeout_sec ({timeout_s:g} s); "
                "raise it, or give the cluster more free CPUs"
            ) from None
        except (ActorGone, RayActorError) as err:
            reason = str(err) if isinstance(err, ActorGone) else _reason(err)
            raise AscentError(f"{what} died while starting: {reason}") from None


def get_through_restarts(
    ray: Any, future: Any, again: Callable[[], Any], timeout_s: float, restart_s: float
) -> Any:
    """The result of `future`; while its actor is restarting, `again()` submits the call anew
    (after whatever the new incarnation needs first, such as the latest weights). The call
    gets `timeout_s`, and at least `restart_s` more from each time it meets a restart."""
    from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError

    deadline = time.monotonic() + timeout_s
    dying_since: float | None = None
    pause = FIRST_PAUSE_S
    while True:
        try:
            return ray.get(future, timeout=max(deadline - time.monotonic(), 0.001))
        except GetTimeoutError:
            raise NoAnswer from None
        except ActorDiedError as err:
            dying_since = dying_since if dying_since is not None else time.monotonic()
            if time.monotonic() - dying_since >= DEAD_AFTER_S:
                raise ActorGone(_reason(err)) from None
        except RayActorError:  # unavailable: restarting
            dying_since = None
        deadline = max(deadline, time.monotonic() + restart_s)
        if time.monotonic() + pause >= deadline:
            raise NoAnswer
        time.sleep(pause)
        pause = min(2 * pause, LONGEST_PAUSE_S)
        future = again()


def _reason(err: Exception) -> str:
    """The error an actor died of (the last "SomeError: ..." line Ray quotes), else Ray's
    own first line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    quoted = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception): ", line)]
    return (quoted[-1] if quoted else lines[0] if lines else type(err).__name__)[:200]
