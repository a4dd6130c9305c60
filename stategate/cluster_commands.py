"""`stategate cluster status|drain|undrain|rebalance`: an elastic cluster as its coordinator
holds it (contracts/coordination.py). Each prints one JSON document, or one line saying what
is wrong and exits 2, having changed nothing. `drain --wait` returns once the node may stop."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from contracts import placement
from contracts.coordination import Coordination, CoordinatorError, State
from contracts.placement import PlacementError
from contracts.project import Project

DRAIN_POLL_S = 0.5  # how often `drain --wait` reads the assignment


def run(project: Project, action: str, node: str | None, wait_s: float | None = None) -> int:
    """`wait_s`: for a drain, wait up to that long until the node holds nothing (then it may
    stop), saying on stderr how many partitions are left as that changes; 1 if it still
    holds some then."""
    cluster = project.cluster
    if cluster.coordinator is None:
        print(
            "stategate: this cluster has no coordinator: its placement is the project file's "
            "(set [cluster] coordinator to make it elastic)",
            file=sys.stderr,
        )
        return 2
    coordination = Coordination(cluster.coordinator, cluster.name, tls=cluster.tls)
    try:
        body = asyncio.run(_act(coordination, action, node, wait_s))
    except (CoordinatorError, PlacementError) as exc:
        print(f"stategate: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(body, indent=2))
    left = body.get("left", [])
    if left:
        print(f"stategate: {node} still holds partitions {left} after {wait_s:g} s: "
              "the drain goes on", file=sys.stderr)  # fmt: skip
    return 1 if left else 0


async def _act(
    coordination: Coordination, action: str, node: str | None, wait_s: float | None
) -> dict[str, Any]:
    await coordination.connect()
    try:
        state = await coordination.read()
        if action == "drain":
            assert node is not None
            _check_drain(state, node)
            await coordination.drain(node)
            state = await coordination.read()
            if wait_s is not None:
                state = await _drained(coordination, node, wait_s)
                left = _held(state, node)
                return {**status(state), "left": left} if left else status(state)
        elif action == "undrain":
            assert node is not None
            if node not in state.draining:
                raise PlacementError(f"{node!r} has no drain to call off")
            await coordination.undrain(node)
            state = await coordination.read()
        elif action == "rebalance":
            await coordination.nudge()
            state = await coordination.read()
        return status(state)
    finally:
        await coordination.close()


async def _drained(coordination: Coordination, node: str, wait_s: float) -> State:
    """The state once `node` holds nothing (every replica it had serves elsewhere), or as
    it is after `wait_s`; how many partitions it holds said on stderr as that changes."""
    deadline = time.monotonic() + wait_s
    said: int | None = None
    while True:
        state = await coordination.read()
        held = _held(state, node)
        if held and len(held) != said:
            print(f"{node}: {len(held)} partitions left to move", file=sys.stderr, flush=True)
            said = len(held)
        if not held or time.monotonic() >= deadline:
            return state
        await asyncio.sleep(DRAIN_POLL_S)


def _held(state: State, node: str) -> list[int]:
    return [] if state.assignment is None else state.assignment.assigned_to(node)


def _check_drain(state: State, node: str) -> None:
    if state.assignment is None:
        raise PlacementError("the cluster has no assignment yet: no node has joined")
    members = sorted(set(state.members) - state.draining)
    placement.drain_check(state.assignment, node, members)


def status(state: State) -> dict[str, Any]:
    assignment = state.assignment
    partitions = []
    if assignment is not None:
        for p in range(assignment.partitions):
            partitions.append(
                {
                    "partition": p,
                    "serving": list(assignment.serving[p]),
                    "warming": list(assignment.warming[p]),
                    "target": list(assignment.target[p]),
                }
            )
    return {
        "leader": state.leader,
        "members": {m.id: m.address for m in sorted(state.members.values(), key=str)},
        # a drained node that stopped is gone, like any stopped node; its mark, left until
        # it starts again (or `undrain`), moves nothing
        "draining": sorted(state.draining & set(state.members)),
        "assignmentVersion": None if assignment is None else assignment.version,
        "partitions": partitions,
    }
