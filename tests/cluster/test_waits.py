"""Waiting out actor restarts by time, on a real local Ray: a restart slower than any count
of quick retries would allow is waited out; an actor gone for good is reported in seconds."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("ray")
import ray

from ascent.cluster.waits import (
    DEAD_AFTER_S,
    ActorGone,
    NoAnswer,
    get_through_restarts,
    wait_ready,
)
from ascent.errors import AscentError


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


class Slow:
    """An actor whose every start after the first takes `restart_s` (a busy machine)."""

    def __init__(self, restart_s: float) -> None:
        if ray.get_runtime_context().was_current_actor_reconstructed:
            time.sleep(restart_s)

    def answer(self, x: int) -> int:
        return x + 1

    def sleep(self, s: float) -> None:
        time.sleep(s)

    def crash(self) -> None:
        os._exit(1)


def test_a_restart_slower_than_quick_retries_is_waited_out():
    actor = ray.remote(max_restarts=1, max_task_retries=0)(Slow).remote(4.0)
    assert ray.get(actor.answer.remote(1)) == 2
    tries = []

    def again():
        tries.append(time.monotonic())
        return actor.answer.remote(41)

    start = time.monotonic()
    assert get_through_restarts(ray, actor.crash.remote(), again, 60, restart_s=60) == 42
    assert time.monotonic() - start >= 3.5  # it did wait for the slow restart
    assert len(tries) >= 1


def test_an_actor_gone_for_good_is_reported_within_seconds():
    actor = ray.remote(max_restarts=0)(Slow).remote(0.0)
    ray.get(actor.answer.remote(0))
    start = time.monotonic()
    with pytest.raises(ActorGone):
        get_through_restarts(ray, actor.crash.remote(), lambda: actor.answer.remote(0), 60, 60)
    assert DEAD_AFTER_S <= time.monotonic() - start < DEAD_AFTER_S + 5


def test_no_answer_by_the_deadline():
    actor = ray.remote(Slow).remote(0.0)
    start = time.monotonic()
    with pytest.raises(NoAnswer):
        get_through_restarts(ray, actor.sleep.remote(30), lambda: actor.sleep.remote(30), 1.0, 0)
    assert time.monotonic() - start < 5
    ray.kill(actor)


class Starting:
    """An actor that takes `start_s` to start, or fails to."""

    def __init__(self, start_s: float, fail: bool = False) -> None:
        time.sleep(start_s)
        if fail:
            raise RuntimeError("no model at /nowhere")

    def ready(self) -> bool:
        return True


def test_a_slow_start_is_waited_for_and_a_failed_one_named():
    slow = [ray.remote(Starting).remote(3.0) for _ in range(2)]
    wait_ready(ray, slow, timeout_s=60, what="a test actor")
    with pytest.raises(
        AscentError,
        match=r"a test actor did not start within \[cluster\] "
        r"startup_timeout_sec \(1 s\); raise it",
    ):
        wait_ready(ray, [ray.remote(Starting).remote(10.0)], timeout_s=1, what="a test actor")
    broken = ray.remote(max_restarts=0)(Starting).remote(0.0, fail=True)
    with pytest.raises(AscentError, match=r"a test actor died while starting: .*no model at"):
        wait_ready(ray, [broken], timeout_s=60, what="a test actor")
