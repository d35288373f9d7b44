"""Calls on Ray actors that Ray may be restarting, waited out by time, not by counts.

Ray answers a call on an actor it is restarting with `ActorUnavailableError`, as often as it
is asked, until the new incarnation is up, which on a busy machine takes seconds; a count of
quick retries runs out long before (the suite failed that way with other jobs on the cores).
A call on an actor that died for good (its `max_restarts` used up) fails with
`ActorDiedError` at once, every time; so does the task that was running when an actor died,
even one Ray will restart. Hence: "unavailable" is waited out until the call's deadline, and
only an actor that keeps answering "died" for `DEAD_AFTER_S` is taken to be gone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

DEAD_AFTER_S = 5.0  # "died" on every try for this long: dead for good
FIRST_PAUSE_S, LONGEST_PAUSE_S = 0.1, 1.0


class ActorGone(Exception):
    """The actor died and Ray will not restart it."""


class NoAnswer(Exception):
    """The call was not answered before its deadline."""


def get_through_restarts(ray: Any, future: Any, again: Callable[[], Any], timeout_s: float) -> Any:
    """The result of `future`; while its actor is restarting, `again()` submits the call anew
    (after whatever the new incarnation needs first, such as the latest weights), for at most
    `timeout_s` in all."""
    from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError

    deadline = time.monotonic() + timeout_s
    dying_since: float | None = None
    pause = FIRST_PAUSE_S
    while True:
        try:
            return ray.get(future, timeout=max(deadline - time.monotonic(), 0.001))
        except GetTimeoutError:
            raise NoAnswer from None
        except ActorDiedError:
            dying_since = dying_since if dying_since is not None else time.monotonic()
            if time.monotonic() - dying_since >= DEAD_AFTER_S:
                raise ActorGone from None
        except RayActorError:  # unavailable: restarting
            dying_since = None
        if time.monotonic() + pause >= deadline:
            raise NoAnswer
        time.sleep(pause)
        pause = min(2 * pause, LONGEST_PAUSE_S)
        future = again()
