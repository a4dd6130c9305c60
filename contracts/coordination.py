"""What an elastic cluster keeps in its coordination service (etcd), and the one client that
reads and writes it: nodes, the pipeline and `stategate cluster` all go through here.

Under the cluster's prefix (`/stategate/<name>/`):
    members/<id>    {"format", "id", "address"}: a node, registered under its own lease, so
                    a node that dies is gone when its lease expires (`session_ttl_s`)
    leader          the id of the node that computes the assignment, under that node's
                    lease: whoever creates the key first leads (an etcd transaction)
    assignment      the Assignment (contracts/placement.py), written only by the leader,
                    each version over the one it read (compare-and-swap)
    draining/<id>   a drain asked for (`stategate cluster drain`): the node keeps serving
                    until its replicas are warm elsewhere, and receives nothing new

A node watches the prefix to wake and reads it whole to know (`read`): the state is a few
kilobytes, and a read after each event leaves nothing to reconcile.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from contracts.clock import now_ms
from contracts.placement import Assignment, PlacementError

FORMAT = 1
SCHEME = "etcd"
DEFAULT_PORT = 2379
CONNECT_TIMEOUT_S = 3


class CoordinatorError(Exception):
    """The coordinator did not answer, or holds what this version cannot read."""


@dataclass(frozen=True)
class Member:
    id: str
    address: str  # host:port its peers and clients reach it on

    def to_json(self) -> bytes:
        return json.dumps({"format": FORMAT, "id": self.id, "address": self.address}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Member:
        try:
            body = json.loads(raw)
            if body["format"] != FORMAT:
                raise CoordinatorError(f"a member record of format {body['format']!r}")
            return cls(str(body["id"]), str(body["address"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise CoordinatorError(f"a member record that is not one: {raw[:80]!r}") from exc


@dataclass(frozen=True)
class State:
    """Everything under the prefix, as of one revision."""

    revision: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    draining: frozenset[str] = frozenset()
    leader: str | None = None
    assignment: Assignment | None = None
    assignment_revision: int = 0  # its key's mod revision: what a leader's write compares


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """`etcd://host:port`; a ValueError naming what is wrong otherwise."""
        parts = urlsplit(url)
        if parts.scheme != SCHEME or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(f"coordinator must look like etcd://host:port, not {url!r}")
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError as exc:
            raise ValueError(f"coordinator {url!r}: {exc}") from None
        return cls(parts.hostname, port)

    def __str__(self) -> str:
        return f"{SCHEME}://{self.host}:{self.port}"


class Coordination:
    """One cluster's keys in etcd. Every failure to reach it is a CoordinatorError."""

    def __init__(self, endpoint: Endpoint, cluster: str) -> None:
        self.endpoint = endpoint
        self.prefix = f"/stategate/{cluster}/".encode()
        self._client: Any = None  # aetcd.Client, imported only by processes that coordinate

    async def connect(self) -> None:
        import aetcd

        client = aetcd.Client(
            self.endpoint.host, self.endpoint.port, connect_wait_timeout=CONNECT_TIMEOUT_S
        )
        try:
            await client.connect()
            await client.status()
        except Exception as exc:  # grpc's errors, translated once here
            await client.close()
            raise CoordinatorError(f"{self.endpoint} does not answer: {exc}") from exc
        self._client = client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    @property
    def client(self) -> Any:
        if self._client is None:
            raise CoordinatorError("not connected")
        return self._client

    def key(self, *parts: str) -> bytes:
        return self.prefix + "/".join(parts).encode()

    async def read(self) -> State:
        async with _translated(self.endpoint):
            found = await self.client.get_prefix(self.prefix)
        revision = found.header.revision if found.header else 0
        members: dict[str, Member] = {}
        draining: set[str] = set()
        leader, assignment, assignment_revision = None, None, 0
        for kv in found:
            name = kv.key[len(self.prefix) :].decode()
            if name.startswith("members/"):
                member = Member.from_json(kv.value)
                members[member.id] = member
            elif name.startswith("draining/"):
                draining.add(name.removeprefix("draining/"))
            elif name == "leader":
                leader = kv.value.decode()
            elif name == "assignment":
                try:
                    assignment = Assignment.from_json(kv.value)
                except PlacementError as exc:
                    raise CoordinatorError(f"the stored assignment: {exc}") from exc
                assignment_revision = kv.mod_revision
        return State(
            revision, members, frozenset(draining), leader, assignment, assignment_revision
        )

    async def changes(self, after: int) -> AsyncIterator[None]:
        """Wakes once per change under the prefix after revision `after`."""
        async with _translated(self.endpoint):
            watch = await self.client.watch_prefix(self.prefix, start_revision=after + 1)
            async for _ in watch:
                yield None

    async def lease(self, ttl_s: int) -> Any:
        async with _translated(self.endpoint):
            return await self.client.lease(ttl_s)

    async def refresh(self, lease: Any) -> int:
        """Keep a lease alive; its remaining TTL (0 when it had expired)."""
        async with _translated(self.endpoint):
            reply = await self.client.refresh_lease(lease.id)
        return int(reply.TTL) if reply is not None else 0

    async def register(self, member: Member, lease: Any) -> None:
        async with _translated(self.endpoint):
            await self.client.put(self.key("members", member.id), member.to_json(), lease=lease)

    async def campaign(self, node: str, lease: Any) -> bool:
        """Become the leader unless someone is; True when this node leads now."""
        key = self.key("leader")
        client = self.client
        async with _translated(self.endpoint):
            won, _ = await client.transaction(
                compare=[client.transactions.version(key) == 0],
                success=[client.transactions.put(key, node.encode(), lease=lease)],
                failure=[],
            )
        return bool(won)

    async def publish(self, assignment: Assignment, over_revision: int) -> bool:
        """Write the next assignment if the stored one is still the one read (its mod
        revision; 0: none yet). False when another write came first."""
        key = self.key("assignment")
        client = self.client
        async with _translated(self.endpoint):
            won, _ = await client.transaction(
                compare=[client.transactions.mod(key) == over_revision],
                success=[client.transactions.put(key, assignment.to_json())],
                failure=[],
            )
        return bool(won)

    async def drain(self, node: str) -> None:
        async with _translated(self.endpoint):
            await self.client.put(self.key("draining", node), b"{}")

    async def nudge(self) -> None:
        """Wake the leader to plan now (`stategate cluster rebalance`)."""
        async with _translated(self.endpoint):
            await self.client.put(self.key("rebalance"), str(now_ms()).encode())

    async def undrain(self, node: str) -> None:
        async with _translated(self.endpoint):
            await self.client.delete(self.key("draining", node))

    async def revoke(self, lease: Any) -> None:
        async with _translated(self.endpoint):
            await lease.revoke()


class _translated:
    """grpc's and aetcd's errors, as CoordinatorError."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, kind: object, error: BaseException | None, tb: object) -> bool:
        if error is None or isinstance(error, CoordinatorError | PlacementError):
            return False
        from aetcd.exceptions import ClientError

        if isinstance(error, ClientError | OSError):
            raise CoordinatorError(f"{self.endpoint}: {error}") from error
        return False
