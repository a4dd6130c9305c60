"""Two lanes on a node's event loop: interactive requests run as they come; bulk requests
run their long loops in slices and give way between slices.

Everything a request does in Python runs on the node's one event loop: routing its keys,
answering them from memory, building its entries, completing its result. A one-key lookup
needs about a millisecond of it; the costliest request the limits allow needs about a
hundred, and run at once that is a hundred-millisecond stall for every other client of the
node. A request whose cost passes `bulk_request_cost` (and an internal request carrying more
than SLICE keys) runs in the bulk lane: its loops take SLICE items at a time, and between
two slices it lets every ready callback run and, while interactive requests are in flight,
waits for them to finish, at most MAX_WAIT_S, so a steady stream of small requests slows
bulk work but never stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from typing import TypeVar

SLICE = 256  # items a bulk loop takes between two turns of the loop (~1 ms of work)
MAX_WAIT_S = 0.005  # longest a bulk slice waits for interactive requests to finish

T = TypeVar("T")
_bulk: ContextVar[Lanes | None] = ContextVar("stategate_bulk_lane", default=None)


class Lanes:
    """A node's lanes: how many interactive requests are in flight, and the bulk lane's
    turns."""

    def __init__(self) -> None:
        self.interactive = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.contextmanager
    def enter(self, bulk: bool) -> Iterator[None]:
        """Run the block (a request, or an internal request) in its lane."""
        if bulk:
            token = _bulk.set(self)
            try:
                yield
            finally:
                _bulk.reset(token)
            return
        self.interactive += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.interactive -= 1
            if not self.interactive:
                self._idle.set()

    async def give_way(self) -> None:
        await asyncio.sleep(0)
        if self.interactive:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(MAX_WAIT_S):
                    await self._idle.wait()


def in_bulk_lane() -> bool:
    return _bulk.get() is not None


async def sliced(items: Sequence[T], size: int = SLICE) -> AsyncIterator[Sequence[T]]:
    """The items in slices of `size`, giving way between them, in the bulk lane; else all of
    them at once."""
    lanes = _bulk.get()
    if lanes is None or len(items) <= size:
        yield items
        return
    for start in range(0, len(items), size):
        if start:
            await lanes.give_way()
        yield items[start : start + size]
