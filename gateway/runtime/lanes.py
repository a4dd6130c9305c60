"""Two lanes on a node: interactive requests have its Python first; a bulk request's long
stretches run on a thread of their own, in slices, and only while no interactive request is
in flight.

A one-key lookup needs well under a millisecond of Python; the costliest request the limits
allow needs about a hundred: routing 10,000 keys, answering them from memory, building and
completing the entries, encoding them. A request whose cost passes `bulk_request_cost` (and
an internal request carrying more than SLICE keys) runs in the bulk lane: its awaits stay on
the event loop, but each long stretch is handed to the node's bulk thread (`offload`), which
works through it in slices (`sliced`). The process has one GIL, and Python shares it
fairly, not by priority; so between two slices the thread waits while any request that is
not bulk is in flight (a GraphQL request over HTTP or an internal query, counted from its
arrival: `Lanes.request`; a peer's status poll mostly waits, and is not counted), and the
loop has the GIL to itself. The wait lasts at most MAX_WAIT_S, so a node saturated with
small requests slows bulk work (at least a slice every MAX_WAIT_S) but never stops it. A
request that arrives during a slice must first take the GIL from the thread, which Python
grants a waiting thread after its switch interval: the node sets it to SWITCH_INTERVAL_S
(`share_the_gil`), so the slice's remainder does not make it wait.

Small bulk work (a request of at most SMALL_BULK_VALUES values, an internal request of at
most SMALL_BULK_KEYS keys: a 1000-key list, stretches of well under a millisecond) runs a
stretch here when no interactive request is in flight as it starts: the hops to the thread
and back cost such a request more than half its time, and shield nothing then.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import TypeVar

SLICE = 256  # items not worth a hop to the bulk thread; an internal request of more keys is bulk
STEP = 64  # items the bulk thread takes between two looks at interactive requests (~0.25 ms)
MAX_WAIT_S = 0.005  # longest the bulk thread waits for interactive requests to finish
SWITCH_INTERVAL_S = 0.0002  # longest a thread waits for the GIL (Python's default: 5 ms)
SMALL_BULK_VALUES = 10_000  # a GraphQL request of at most these values is small bulk work
SMALL_BULK_KEYS = 1_024  # so is an internal request of at most these keys

T = TypeVar("T")
_this_thread = threading.local()
_bulk: ContextVar[tuple[Lanes, bool] | None] = ContextVar("stategate_bulk_lane", default=None)
_counted: ContextVar[bool] = ContextVar("stategate_counted_request", default=False)
_INTERACTIVE = contextlib.nullcontext()  # the interactive lane: nothing to enter


class Lanes:
    """A node's bulk thread, and how many interactive requests are in flight: the requests
    counted from their arrival (`request`), but those that entered the bulk lane."""

    def __init__(self) -> None:
        self.interactive = 0
        self._idle = threading.Event()
        self._idle.set()
        self._executor = ThreadPoolExecutor(1, "bulk", initializer=_mark_bulk_thread)

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Count the block (a request, from its arrival) as interactive, until it enters the
        bulk lane."""
        token = _counted.set(True)
        self._add(1)
        try:
            yield
        finally:
            self._add(-1)
            _counted.reset(token)

    def enter(self, bulk: bool, small: bool = False) -> contextlib.AbstractContextManager[None]:
        """Run the block (a request, or an internal request) in its lane; `small` bulk work
        runs each stretch here when no interactive request is in flight as it starts."""
        return self._bulk(small) if bulk else _INTERACTIVE

    @contextlib.contextmanager
    def _bulk(self, small: bool) -> Iterator[None]:
        token = _bulk.set((self, small))
        counted = _counted.get()
        if counted:
            self._add(-1)
        try:
            yield
        finally:
            if counted:
                self._add(1)
            _bulk.reset(token)

    def _add(self, change: int) -> None:
        """Count; the event (a lock each time) only changes between none and some."""
        self.interactive += change
        if not self.interactive:
            self._idle.set()
        elif self.interactive == change:
            self._idle.clear()

    def runs_here(self, small: bool) -> bool:
        """Whether bulk work starting now runs here and now rather than on the bulk thread:
        small bulk work, while no interactive request is in flight."""
        return small and not self.interactive

    def give_way(self) -> None:
        """On the bulk thread: wait while interactive requests are in flight (the GIL is
        theirs meanwhile), at most MAX_WAIT_S."""
        self._idle.wait(MAX_WAIT_S)

    async def run(self, work: Callable[..., T], *args: object) -> T:
        """`work(*args)` on the bulk thread, in the caller's context (so in its lane)."""
        run = contextvars.copy_context().run
        return await asyncio.get_running_loop().run_in_executor(self._executor, run, work, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


def share_the_gil() -> None:
    """Hand the GIL to a waiting thread after SWITCH_INTERVAL_S (for the whole process)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def in_bulk_lane() -> bool:
    return _bulk.get() is not None


async def offload(work: Callable[..., T], *args: object, items: int | None = None) -> T:
    """`work(*args)`: on the bulk thread in the bulk lane (when its `items`, if given, are
    more than a SLICE: a hop to the thread costs about what a small stretch does), else here
    and now."""
    lane = _bulk.get()
    if lane is None or (items is not None and items <= SLICE):
        return work(*args)
    lanes, small = lane
    if lanes.runs_here(small):
        return work(*args)
    return await lanes.run(work, *args)


def sliced(items: Sequence[T], size: int = STEP) -> Iterator[Sequence[T]]:
    """The items in slices of `size`, giving way between them on the bulk thread; else all
    of them at once."""
    lane = _bulk.get()
    if lane is None or len(items) <= size or not on_bulk_thread():
        yield items
        return
    lanes = lane[0]
    for start in range(0, len(items), size):
        if start:
            lanes.give_way()
        yield items[start : start + size]


def _mark_bulk_thread() -> None:
    _this_thread.bulk = True


def on_bulk_thread() -> bool:
    return getattr(_this_thread, "bulk", False)
