"""`stategate cluster status|drain|undrain|rebalance`: an elastic cluster as its coordinator
holds it (contracts/coordination.py). Each prints one JSON document, or one line saying what
is wrong and exits 2, having changed nothing. `drain --wait` returns once the node may stop.

`status` also asks every node what it runs and serves (its /internal/status, with the
cluster secret), for a static cluster too: its release and schema version, the versions of
the partitions it serves, and whether the nodes differ (a rolling upgrade under way)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import httpx

from contracts import chains, placement
from contracts.cluster_secret import secret_headers
from contracts.coordination import Coordination, CoordinatorError, State
from contracts.placement import PlacementError
from contracts.project import Project, scheme
from contracts.tls import verify
from gateway.cluster.status import NodeStatus
from gateway.wire.protocol import ProtocolError

DRAIN_POLL_S = 0.5  # how often `drain --wait` reads the assignment
STATUS_TIMEOUT_S = 5.0  # a node's answer to `status`; one that takes longer is unreachable


def run(project: Project, action: str, node: str | None, wait_s: float | None = None) -> int:
    """`wait_s`: for a drain, wait up to that long until the node holds nothing (then it may
    stop), saying on stderr how many partitions are left as that changes; 1 if it still
    holds some then."""
    cluster = project.cluster
    if cluster.coordinator is None and action == "status":
        addresses = {n.id: n.url for n in cluster.nodes}
        print(json.dumps(asyncio.run(nodes_status(project, addresses)), indent=2))
        return 0
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
    if action == "status":
        addresses = {member: f"{scheme(cluster.tls)}://{address}"
                     for member, address in body["members"].items()}  # fmt: skip
        body.update(asyncio.run(nodes_status(project, addresses)))
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


async def nodes_status(project: Project, addresses: dict[str, str]) -> dict[str, Any]:
    """What each node says of itself, asked all at once: `nodes` (a node that does not
    answer says why), the nodes by `releases`, by `schemas` and by the versions of each
    format they read (`formats`: README, Upgrades and rollback), and `mixed`: whether the
    nodes that answered differ in any."""
    asked = await ask_nodes(project, addresses)
    said = [_node_status(project, n, addresses[n], status) for n, status in asked.items()]
    releases: dict[str, list[str]] = {}
    schemas: dict[str, list[str]] = {}
    formats: dict[str, dict[str, list[str]]] = {}
    for one in said:
        if one["reachable"]:
            releases.setdefault(one["release"], []).append(one["id"])
            schemas.setdefault(one["schema"], []).append(one["id"])
            for name, versions in (one["formats"] or {}).items():
                read = ",".join(map(str, versions))
                formats.setdefault(name, {}).setdefault(read, []).append(one["id"])
    mixed = any(len(by) > 1 for by in (releases, schemas, *formats.values()))
    body = {"releases": releases, "schemas": schemas, "formats": formats, "mixed": mixed}
    return {"nodes": said, **body}


def cluster_client(project: Project) -> httpx.AsyncClient:
    """A client of the nodes' internal endpoints: the cluster's TLS, its secret on every
    call, STATUS_TIMEOUT_S."""
    headers = secret_headers(project.cluster.secret)
    return httpx.AsyncClient(verify=verify(project.tls), timeout=STATUS_TIMEOUT_S, headers=headers)


async def ask_nodes(project: Project, addresses: dict[str, str]) -> dict[str, NodeStatus | str]:
    """Each node's status, asked all at once, or why it gave none."""
    async with cluster_client(project) as client:
        said = await asyncio.gather(*(_ask(client, url) for url in addresses.values()))
    return dict(zip(addresses, said, strict=True))


async def _ask(client: httpx.AsyncClient, url: str) -> NodeStatus | str:
    try:
        reply = await client.get(f"{url}/internal/status")
        reply.raise_for_status()
        return NodeStatus.from_json(reply.content)
    except (httpx.HTTPError, ProtocolError) as exc:
        return str(exc) or repr(exc)


def _node_status(project: Project, node: str, url: str, status: NodeStatus | str) -> dict[str, Any]:
    if isinstance(status, str):
        return {"id": node, "address": url, "reachable": False, "error": status}
    return {
        "id": node,
        "address": url,
        "reachable": True,
        "release": status.release or None,  # None: a release from before nodes said it
        "schema": status.schema or None,
        "formats": status.formats or None,  # None: a release from before nodes said them
        # the declared stores not built yet on every chain it serves (README: Changing stores)
        "pending": status.pending,
        # partition -> the version it serves, of the partitioned stores and of the global ones
        "serving": _versions(project, status, globals_=False),
        "global": _versions(project, status, globals_=True),
        "syncErrors": {str(p): e for p, e in sorted(status.sync_errors.items())},
    }


def _versions(project: Project, status: NodeStatus, globals_: bool) -> dict[str, int]:
    return {
        str(chains.partition(project, chain)): state.version
        for chain, state in sorted(status.partitions.items())
        if chains.is_global(project, chain) == globals_
    }
