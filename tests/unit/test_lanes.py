"""The two lanes of a node's event loop: bulk work gives way to interactive requests between
its slices, and never waits longer than MAX_WAIT_S for them."""

from __future__ import annotations

import asyncio
import time

from gateway.lanes import MAX_WAIT_S, SLICE, Lanes, in_bulk_lane, sliced


async def _bulk(lanes: Lanes, items: int) -> list[float]:
    """Walk `items` in the bulk lane; the time each slice started."""
    starts = []
    with lanes.enter(bulk=True):
        assert in_bulk_lane()
        async for _ in sliced(range(items)):
            starts.append(time.perf_counter())
    assert not in_bulk_lane()
    return starts


def test_outside_the_bulk_lane_everything_is_one_slice() -> None:
    async def walk() -> list[int]:
        with Lanes().enter(bulk=False):
            return [len(some) async for some in sliced(range(SLICE * 3))]

    assert asyncio.run(walk()) == [SLICE * 3]


def test_bulk_slices_run_back_to_back_when_no_interactive_request_is_in_flight() -> None:
    starts = asyncio.run(_bulk(Lanes(), SLICE * 4))
    assert len(starts) == 4
    assert starts[-1] - starts[0] < MAX_WAIT_S


def test_bulk_slices_wait_for_interactive_requests_at_most_max_wait() -> None:
    async def both() -> tuple[list[float], float]:
        lanes = Lanes()
        finished = 0.0

        async def interactive() -> None:
            nonlocal finished
            with lanes.enter(bulk=False):
                await asyncio.sleep(MAX_WAIT_S / 2)
                finished = time.perf_counter()

        task = asyncio.create_task(interactive())
        await asyncio.sleep(0)  # the interactive request is in flight
        starts = await _bulk(lanes, SLICE * 2)
        await task
        return starts, finished

    starts, finished = asyncio.run(both())
    assert starts[1] >= finished  # the second slice waited for the interactive request

    async def steady() -> list[float]:
        lanes = Lanes()
        with lanes.enter(bulk=False):  # one interactive request that never ends
            return await _bulk(lanes, SLICE * 3)

    starts = asyncio.run(steady())
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(MAX_WAIT_S * 0.9 <= gap < MAX_WAIT_S * 20 for gap in gaps), gaps
