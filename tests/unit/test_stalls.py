"""A node's own stalls: measured as its event loop's lateness, and a peer's timeout in one is
not held against the peer (gateway/runtime/stalls.py, gateway/cluster/health.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from contracts.project import Project, load
from gateway.cluster.health import Membership
from gateway.runtime.stalls import STALL_S, TICK_S, Stalls
from gateway.wire.mock import Call, MockTransport
from gateway.wire.peer_errors import PeerUnreachable
from gateway.wire.peers import PeerClient
from gateway.wire.transport import Reply
from tests.cores import node_core
from tests.projects import write_project

BLOCKED_S = 2 * STALL_S  # a stall: the loop does not run this long


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watching(clock: Clock) -> Stalls:
    stalls = Stalls(clock)
    stalls.woke = clock.now
    return stalls


def test_ticks_on_time_are_no_stall() -> None:
    clock = Clock()
    stalls = watching(clock)
    for _ in range(100):
        clock.now += TICK_S + STALL_S / 2  # late, but not by a stall's length
        stalls.tick()
    assert stalls.since(0.0) == 0.0 and not stalls.stalls


def test_a_late_tick_is_a_stall_counted_where_it_overlaps() -> None:
    clock = Clock()
    stalls = watching(clock)
    began = clock.now
    clock.now += 5.0
    stalls.tick()
    assert list(stalls.stalls) == [(began, began + 5.0)]
    clock.now += TICK_S
    assert stalls.since(began - 1) == pytest.approx(5.0)
    assert stalls.since(began + 4.0) == pytest.approx(1.0)
    assert stalls.since(began + 5.0) == 0.0


def test_a_stall_counts_before_the_task_has_seen_it() -> None:
    """The loop resumes and runs other callbacks (a timeout's) before the task's tick."""
    clock = Clock()
    stalls = watching(clock)
    began = clock.now
    clock.now += 3.0
    assert stalls.since(began + 1.0) == pytest.approx(2.0)
    assert not stalls.stalls


def test_a_stalls_not_watching_knows_of_none() -> None:
    clock = Clock()
    stalls = Stalls(clock)
    clock.now += 60.0
    assert stalls.since(0.0) == 0.0


def test_a_blocked_event_loop_is_a_stall() -> None:
    async def main() -> float:
        stalls = Stalls()
        watch = asyncio.create_task(stalls.watch_forever())
        await asyncio.sleep(2 * TICK_S)
        started = time.monotonic()
        time.sleep(BLOCKED_S)  # blocks the loop, as a stop or a long pause would
        stalled = stalls.since(started)
        watch.cancel()
        return stalled

    assert asyncio.run(main()) >= BLOCKED_S - TICK_S


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return load(write_project(Path(tmp_path_factory.mktemp("stalls")), [7201, 7202, 7203]))


def polled(project: Project, stall_s: float) -> dict[str, bool]:
    """node1's beliefs after one poll of peers whose calls time out, node1 having stalled
    `stall_s` seconds while they did."""

    def timed_out(call: Call) -> Reply:
        time.sleep(stall_s)  # the loop does not run: a stall of node1's own
        raise PeerUnreachable("timed out", hung=True)

    async def main() -> dict[str, bool]:
        stalls = Stalls()
        watch = asyncio.create_task(stalls.watch_forever())
        await asyncio.sleep(2 * TICK_S)
        peers = PeerClient(project.cluster.secret, MockTransport(timed_out))
        membership = Membership(node_core(project, peers), stalls)
        await membership.poll_once()
        watch.cancel()
        return membership.beliefs()

    return asyncio.run(main())


def test_a_timeout_in_a_stall_of_this_node_is_not_held_against_the_peer(project: Project) -> None:
    assert polled(project, stall_s=BLOCKED_S) == {"node2": True, "node3": True}


def test_a_timeout_while_this_node_ran_marks_the_peer_down(project: Project) -> None:
    assert polled(project, stall_s=0.0) == {"node2": False, "node3": False}
