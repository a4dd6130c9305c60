"""`stategate cluster status|drain|undrain|rebalance`: an elastic cluster as its coordinator
holds it (contracts/coordination.py). Each prints one JSON document, or one line saying what
is wrong and exits 2, having changed nothing."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from contracts import placement
from contracts.coordination import Coordination, CoordinatorError, State
from contracts.placement import PlacementError
from contracts.project import Project


def run(project: Project, action: str, node: str | None) -> int:
    cluster = project.cluster
    if cluster.coordinator is None:
        print(
            "stategate: this cluster has no coordinator: its placement is the project file's "
            "(set [cluster] coordinator to make it elastic)",
            file=sys.stderr,
        )
        return 2
    coordination = Coordination(cluster.coordinator, cluster.name)
    try:
        body = asyncio.run(_act(coordination, action, node))
    except (CoordinatorError, PlacementError) as exc:
        print(f"stategate: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(body, indent=2))
    return 0


async def _act(coordination: Coordination, action: str, node: str | None) -> dict[str, Any]:
    await coordination.connect()
    try:
        state = await coordination.read()
        if action == "drain":
            assert node is not None
            _check_drain(state, node)
            await coordination.drain(node)
            state = await coordination.read()
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
