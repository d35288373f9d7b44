"""The concurrent requests of an evaluation: every mode (plain, agentic, grading) runs its
problems as asyncio tasks, stops them all on the first failure that is not a problem's own,
and prints the first few failed requests as they happen."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

REPORTED_FAILURES = 5  # problems whose failed requests are printed as they happen


async def all_or_first_error(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Wait for every task; on the first exception cancel the rest and raise it."""
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in done:
        if task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
