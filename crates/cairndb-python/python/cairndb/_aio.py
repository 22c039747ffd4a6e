"""Async iteration of subscriptions (``async for ev in db.subscribe(0)``) and
change streams (``async for change in coll.watch()``)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from ._native import ClosedError

#: Seconds one wait in the executor lasts: a cancelled ``async for`` frees
#: its worker thread within this.
POLL = 0.25


async def events(sub: Any, poll: float = POLL) -> AsyncIterator[Any]:
    """Yields the subscription's events, waiting for each in the loop's
    default executor (the event loop never blocks); ends when the
    subscription is closed."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            ev = await loop.run_in_executor(None, sub.next, poll)
        except ClosedError:
            return
        if ev is not None:
            yield ev


async def changes(stream: Any, poll: float = POLL) -> AsyncIterator[Any]:
    """Yields the change stream's events, waiting for each in the loop's
    default executor (the event loop never blocks); ends after the stream's
    ``invalidate`` or when it is closed."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            ev = await loop.run_in_executor(None, stream.try_next, poll)
        except ClosedError:
            return
        if ev is not None:
            yield ev
        elif not stream.alive:
            return
