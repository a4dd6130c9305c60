"""A node's two lanes: bulk stretches run on the bulk thread, in slices that wait while an
interactive request is in flight, never longer than MAX_WAIT_S; outside the bulk lane
everything runs here, at once."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

from gateway.runtime.lanes import MAX_WAIT_S, SLICE, STEP, Lanes, in_bulk_lane, offload, sliced


def _walk(items: int) -> tuple[str, list[float]]:
    """Walk `items` in slices: the thread it ran on, and the time each slice started."""
    starts = [time.perf_counter() for _ in sliced(range(items))]
    return threading.current_thread().name, starts


async def _bulk(lanes: Lanes, items: int) -> tuple[str, list[float]]:
    with lanes.enter(bulk=True):
        assert in_bulk_lane()
        walked = await offload(_walk, items)
    assert not in_bulk_lane()
    return walked


@contextlib.contextmanager
def _lanes() -> Iterator[Lanes]:
    lanes = Lanes()
    try:
        yield lanes
    finally:
        lanes.close()


def test_outside_the_bulk_lane_everything_runs_here_in_one_slice() -> None:
    async def walk() -> tuple[str, list[float]]:
        with _lanes() as lanes, lanes.enter(bulk=False):
            return await offload(_walk, STEP * 3)

    thread, starts = asyncio.run(walk())
    assert thread == threading.current_thread().name
    assert len(starts) == 1


def test_small_stretches_of_bulk_work_run_here() -> None:
    async def small() -> str:
        with _lanes() as lanes, lanes.enter(bulk=True):
            return await offload(lambda: threading.current_thread().name, items=SLICE)

    assert asyncio.run(small()) == threading.current_thread().name


async def _small_bulk(lanes: Lanes) -> str:
    with lanes.enter(bulk=True, small=True):
        return await offload(lambda: threading.current_thread().name, items=SLICE + 1)


def test_small_bulk_work_runs_here_unless_an_interactive_request_is_in_flight() -> None:
    """A hop to the bulk thread and back costs more than it shields when nothing waits."""

    async def alone_then_beside() -> tuple[str, str]:
        with _lanes() as lanes:
            alone = await _small_bulk(lanes)
            in_flight, done = asyncio.Event(), asyncio.Event()

            async def interactive() -> None:
                with lanes.request():
                    in_flight.set()
                    await done.wait()

            task = asyncio.create_task(interactive())
            await in_flight.wait()
            beside = await _small_bulk(lanes)
            done.set()
            await task
            return alone, beside

    alone, beside = asyncio.run(alone_then_beside())
    assert alone == threading.current_thread().name
    assert beside.startswith("bulk")


def test_bulk_slices_run_back_to_back_on_the_bulk_thread_when_nothing_else_is_in_flight() -> None:
    async def alone() -> tuple[str, list[float]]:
        with _lanes() as lanes:
            return await _bulk(lanes, STEP * 4)

    thread, starts = asyncio.run(alone())
    assert thread.startswith("bulk")
    assert len(starts) == 4
    assert starts[-1] - starts[0] < MAX_WAIT_S


def test_bulk_slices_wait_for_interactive_requests_at_most_max_wait() -> None:
    async def both() -> tuple[list[float], float]:
        finished = 0.0
        with _lanes() as lanes:

            async def interactive() -> None:
                nonlocal finished
                with lanes.request():
                    await asyncio.sleep(MAX_WAIT_S / 2)
                    finished = time.perf_counter()

            task = asyncio.create_task(interactive())
            await asyncio.sleep(0)  # the interactive request is in flight
            _, starts = await _bulk(lanes, STEP * 2)
            await task
            return starts, finished

    starts, finished = asyncio.run(both())
    assert starts[1] >= finished  # the second slice waited for the interactive request

    async def steady() -> list[float]:
        with _lanes() as lanes:
            done = asyncio.Event()

            async def interactive() -> None:  # one interactive request in flight throughout
                with lanes.request():
                    await done.wait()

            task = asyncio.create_task(interactive())
            await asyncio.sleep(0)
            _, starts = await _bulk(lanes, STEP * 3)
            done.set()
            await task
            return starts

    starts = asyncio.run(steady())
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(MAX_WAIT_S * 0.9 <= gap < MAX_WAIT_S * 20 for gap in gaps), gaps


def test_a_request_that_enters_the_bulk_lane_is_no_longer_interactive() -> None:
    async def request() -> tuple[list[float], int, int]:
        with _lanes() as lanes, lanes.request():
            before = lanes.interactive
            with lanes.enter(bulk=True):
                _, starts = await offload(_walk, STEP * 3)
            return starts, before, lanes.interactive

    starts, before, after = asyncio.run(request())
    assert (before, after) == (1, 1)
    assert starts[-1] - starts[0] < MAX_WAIT_S  # it does not wait for itself
