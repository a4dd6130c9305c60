"""What an elastic cluster keeps in its coordination service (etcd), and the one client that
reads and writes it: nodes, the pipeline and `stategate cluster` all go through here.

Under the cluster's prefix (`/stategate/<name>/`):
    members/<id>    {"format", "id", "address", "holds"}: a node, registered under its own
                    lease, so a node that dies is gone when its lease expires
                    (`session_ttl_s`); `holds` lists the partitions whose data it has
                    (served, or files on its disk), which placement prefers to give it
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

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from contracts.clock import now_ms
from contracts.entries import ConfigError
from contracts.placement import Assignment, PlacementError, Replica
from contracts.tls import CLIENT, Tls

FORMAT = 1
SCHEME = "etcd"
DEFAULT_PORT = 2379
CONNECT_TIMEOUT_S = 3
LEASE_NOT_FOUND = "requested lease not found"  # etcd's error for an expired lease
CALL_TIMEOUT_S = 3.0  # a call's deadline, unless the caller gives one


class CoordinatorError(Exception):
    """The coordinator did not answer, or holds what this version cannot read."""


@dataclass(frozen=True)
class Member:
    id: str
    address: str  # host:port its peers and clients reach it on
    holds: frozenset[int] = frozenset()  # partitions whose data it has: served, or on disk

    def to_json(self) -> bytes:
        body = {"format": FORMAT, "id": self.id, "address": self.address}
        return json.dumps({**body, "holds": sorted(self.holds)}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Member:
        """A member record; one written before `holds` existed holds nothing."""
        try:
            body = json.loads(raw)
            if body["format"] != FORMAT:
                raise CoordinatorError(f"a member record of format {body['format']!r}")
            holds = body.get("holds", [])
            if not isinstance(holds, list) or not all(_partition(p) for p in holds):
                raise TypeError(f"holds is not a list of partitions: {holds!r}")
            return cls(str(body["id"]), str(body["address"]), frozenset(holds))
        except (ValueError, KeyError, TypeError) as exc:
            raise CoordinatorError(f"a member record that is not one: {raw[:80]!r}") from exc

    @property
    def holding(self) -> frozenset[Replica]:
        """What it holds, as placement counts it."""
        return frozenset((p, self.id) for p in self.holds)


def _partition(value: object) -> bool:
    return type(value) is int and value >= 0


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
    """One member of the coordination service."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def endpoints(url: str) -> tuple[Endpoint, ...]:
    """`etcd://host[:port][,host[:port]...]` (every member a client may ask; etcd's client
    port, DEFAULT_PORT, when a member names none); a ValueError naming what is wrong
    otherwise."""
    shape = f"coordinator must look like etcd://host[:port][,host[:port]...], not {url!r}"
    scheme, _, rest = url.partition("://")
    if scheme != SCHEME or not rest or "/" in rest.rstrip("/"):
        raise ValueError(shape)
    found = []
    for member in rest.rstrip("/").split(","):
        parts = urlsplit(f"{SCHEME}://{member.strip()}")
        if not parts.hostname or parts.path:
            raise ValueError(shape)
        try:
            found.append(Endpoint(parts.hostname, parts.port or DEFAULT_PORT))
        except ValueError as exc:
            raise ValueError(f"coordinator {url!r}: {exc}") from None
    return tuple(found)


class Coordination:
    """One cluster's keys in etcd. Every failure to reach it is a CoordinatorError.

    Each call is bounded by `timeout_s`: a member cut off by the network answers nothing,
    and a member on the minority side of a split cannot answer. A call that fails closes
    the connection, and the next call connects to the next member that answers, as etcd's
    own clients balance over the members they are given; a watch on the closed connection
    ends, and its caller watches again."""

    def __init__(
        self,
        url: str,
        cluster: str,
        timeout_s: float = CALL_TIMEOUT_S,
        tls: Tls | None = None,
        holder: str = CLIENT,
    ) -> None:
        self.url = url
        self.tls = tls
        self.holder = holder  # whose certificate it presents with mutual TLS: a node's own
        self.members = endpoints(url)
        self.prefix = f"/stategate/{cluster}/".encode()
        self.timeout_s = timeout_s
        self._client: _Connection | None = None
        self._at = 0  # the member connected to, or the next to try
        self._connecting = asyncio.Lock()

    async def connect(self) -> None:
        """Connect to the first member that answers, from the one after the last that
        failed; a CoordinatorError naming each member's failure when none does."""
        async with self._connecting:
            if self._client is not None:
                return
            failures = []
            for _ in self.members:
                member = self.members[self._at]
                try:
                    self._client = _Connection(await self._open(member))
                    return
                except ConfigError as exc:  # a file of [tls] it cannot read: no member would do
                    raise CoordinatorError(str(exc)) from None
                except Exception as exc:  # noqa: BLE001 - grpc's errors, translated once here
                    failures.append(f"{member} does not answer: {exc}")
                    self._at = (self._at + 1) % len(self.members)
            raise CoordinatorError("; ".join(failures))

    async def _open(self, member: Endpoint) -> Any:
        from contracts.etcd_client import client as etcd_client

        client = etcd_client(
            member.host,
            member.port,
            self.tls,
            self.holder,
            timeout=self.timeout_s,
            connect_wait_timeout=CONNECT_TIMEOUT_S,
        )
        try:
            await client.connect()
            await client.status()
        except BaseException:
            await self._closed(client)
            raise
        return client

    async def close(self) -> None:
        connection, self._client = self._client, None
        if connection is not None:
            await self._dropped(connection)

    async def _dropped(self, connection: _Connection) -> None:
        connection.gone.set()  # ends the watches on it, whatever aetcd's close does
        await self._closed(connection.etcd)

    async def _closed(self, client: Any) -> None:
        """Close a client, within the call timeout: aetcd's close waits on its watch stream,
        which a connection cut off by the network may never end."""
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.close(), self.timeout_s)

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[_Connection]:
        """The connection, (re)connecting first; a failure within closes it, so that the
        next call tries the next member."""
        if self._client is None:
            await self.connect()
        connection = self._client
        assert connection is not None
        try:
            yield connection
        except (CoordinatorError, PlacementError):
            raise
        except (Exception, asyncio.CancelledError) as exc:  # aetcd's, grpc's, the OS's: one
            # failure here. A call on a channel another call closed meanwhile raises grpc's
            # UsageError, or CancelledError: only a cancel of this task itself is one.
            task = asyncio.current_task()
            if isinstance(exc, asyncio.CancelledError) and task and task.cancelling():
                raise
            member = self.members[self._at]
            if self._client is connection:  # not already replaced by a concurrent call
                self._client = None
                self._at = (self._at + 1) % len(self.members)
                await self._dropped(connection)
            raise CoordinatorError(f"{member}: {exc or type(exc).__name__}") from exc

    def key(self, *parts: str) -> bytes:
        return self.prefix + "/".join(parts).encode()

    async def read(self) -> State:
        async with self._session() as connection:
            found = await connection.etcd.get_prefix(self.prefix)
        try:
            return self._state(found)
        except UnicodeDecodeError as exc:
            raise CoordinatorError(f"a key or value that is not UTF-8: {exc}") from exc

    def _state(self, found: Any) -> State:
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
        """Wakes once per change under the prefix after revision `after`; ends when the
        connection is closed (another call failed)."""
        async with self._session() as connection:
            watch = await connection.etcd.watch_prefix(self.prefix, start_revision=after + 1)
            events = aiter(watch)
            gone = asyncio.ensure_future(connection.gone.wait())
            try:
                while True:
                    event = asyncio.ensure_future(anext(events))
                    await asyncio.wait({event, gone}, return_when=asyncio.FIRST_COMPLETED)
                    if not event.done():
                        event.cancel()
                        return
                    try:
                        event.result()
                    except StopAsyncIteration:
                        return
                    yield None
            finally:
                gone.cancel()

    async def lease(self, ttl_s: int) -> int:
        """A new lease's id."""
        async with self._session() as connection:
            return int((await connection.etcd.lease(ttl_s)).id)

    async def refresh(self, lease: int) -> int:
        """Keep a lease alive; its remaining TTL (0 when it had expired: the leader says so
        with a TTL of 0, a member that forwards the keep-alive with an error)."""
        try:
            async with self._session() as connection:
                reply = await connection.etcd.refresh_lease(lease)
        except CoordinatorError as exc:
            if LEASE_NOT_FOUND in str(exc):
                return 0
            raise
        return int(reply.TTL) if reply is not None else 0

    async def register(self, member: Member, lease: int) -> None:
        async with self._session() as connection:
            etcd = connection.etcd
            await etcd.put(self.key("members", member.id), member.to_json(), lease=lease)

    async def campaign(self, node: str, lease: int) -> bool:
        """Become the leader unless someone is; True when this node leads now."""
        key = self.key("leader")
        async with self._session() as connection:
            client = connection.etcd
            won, _ = await client.transaction(
                compare=[client.transactions.version(key) == 0],
                success=[client.transactions.put(key, node.encode(), lease=lease)],
                failure=[],
            )
        return bool(won)

    async def publish(self, assignment: Assignment, over_revision: int, leader: str) -> bool:
        """Write the next assignment if `leader` still leads and the stored one is still the
        one read (its mod revision; 0: none yet). False when either changed meanwhile."""
        key = self.key("assignment")
        async with self._session() as connection:
            client = connection.etcd
            won, _ = await client.transaction(
                compare=[
                    client.transactions.value(self.key("leader")) == leader.encode(),
                    client.transactions.mod(key) == over_revision,
                ],
                success=[client.transactions.put(key, assignment.to_json())],
                failure=[],
            )
        return bool(won)

    async def drain(self, node: str) -> None:
        async with self._session() as connection:
            await connection.etcd.put(self.key("draining", node), b"{}")

    async def nudge(self) -> None:
        """Wake the leader to plan now (`stategate cluster rebalance`)."""
        async with self._session() as connection:
            await connection.etcd.put(self.key("rebalance"), str(now_ms()).encode())

    async def undrain(self, node: str) -> None:
        async with self._session() as connection:
            await connection.etcd.delete(self.key("draining", node))

    async def revoke(self, lease: int) -> None:
        async with self._session() as connection:
            await connection.etcd.revoke_lease(lease)


async def read_once(url: str, cluster: str, tls: Tls | None = None) -> State:
    """The cluster's state in the coordinator at `url`, over a connection of its own."""
    coordination = Coordination(url, cluster, tls=tls)
    await coordination.connect()
    try:
        return await coordination.read()
    finally:
        await coordination.close()


@dataclass
class _Connection:
    etcd: Any  # aetcd.Client, imported only by processes that coordinate
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # set once it is dropped
