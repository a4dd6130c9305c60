"""The keeper: the one process of a node that joins the cluster, syncs and installs, and
tells its followers (gateway/workers/follower.py) what it serves as it changes.

A follower hears every chain the keeper serves as the list of its layer files, and its
deltas as the keeper's levels, whose images it maps (gateway/storage/catalog/layers.py: one copy of
each level, one read and merge of each delta, whatever the workers). The keeper alone
deletes files; a follower that finds one gone (the keeper moved on meanwhile) waits for the
newer chain that made it go, which the keeper tells next. What it tells is each follower's
difference from what it last heard: at once after a switch or an asked sync, and at least
every PUBLISH_INTERVAL_S (levels merged, a compaction at the same version, the coordinator's
and the store's state).

A follower beats on the channel every BEAT_S. One silent for STUCK_S (stopped by SIGSTOP, or
its event loop blocked) is killed, and started again by its thread (stategate/workers.py):
with SO_REUSEPORT the kernel goes on handing a stuck worker its share of the node's new
connections, which wait on it, and its listening socket leaves the port's group only once
it is closed. Only the time this keeper itself ran counts: after a stall of its own, the
beats that came meanwhile may be unread still.

A stopping keeper cuts its followers' lifeline (gateway/workers/lifeline.py) and closes the
channel, and waits for every follower it started, joined or not: each lets its requests
under way finish, and one still there after that is killed. So a stopped node leaves no
process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.cluster.coordinator import Coordinator
from gateway.storage.delivery.node_core import NodeCore
from gateway.storage.delivery.sync import SnapshotSync, StoreUnreachable
from gateway.workers.channel import (
    LINE_LIMIT,
    Ask,
    Beat,
    ChainNews,
    ClusterNews,
    DeliveryNews,
    Link,
    Message,
    Ready,
    Serving,
)
from gateway.workers.roles import Followers, Workers

log = logging.getLogger(__name__)
PUBLISH_INTERVAL_S = 1.0
METRICS_WAIT_S = 2.0  # how long a scrape waits for each follower's metrics
STOP_POLL_S = 0.05
KILL_WAIT_S = 5.0  # a follower killed ends at once: this long is a bug's, not a wait's
STUCK_S = 3.0  # a follower silent this long is stuck (it beats every BEAT_S)
STUCK_CHECK_S = 0.5
LATE_S = 0.25  # a check this late: this keeper did not run meanwhile (gateway/runtime/stalls.py)


@dataclass
class _Heard:
    """What one follower was told last."""

    chains: dict[int, ChainNews] = field(default_factory=dict)
    cluster: ClusterNews | None = None
    delivery: DeliveryNews | None = None


class Keeper:
    def __init__(
        self,
        address: str,
        followers: Followers,
        core: NodeCore,
        coordinator: Coordinator,
        sync: SnapshotSync,
        metrics: Callable[[], Awaitable[bytes]],  # the node's, every worker's summed
    ) -> None:
        self.address = address
        self.followers = followers
        self.catalog = core.catalog
        self.view = core.topology
        self.coordinator = coordinator
        self.sync = sync
        self.switches = core.switches
        self.metrics = metrics
        self._links: dict[Link, _Heard] = {}
        self._pids: dict[Link, int] = {}  # each follower's at the other end
        self._serving: set[Link] = set()  # the followers that said they serve
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.address)  # abstract: uvloop refuses such a path itself
        self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=LINE_LIMIT)
        self._tasks.append(asyncio.create_task(self._publish_forever()))
        self._tasks.append(asyncio.create_task(self._watch_forever()))

    async def stop(self, wait_s: float) -> None:
        """Stop every follower this keeper started, joined or not, and return once they
        all ended: each lets its requests under way finish, and one still there after
        `wait_s` is killed."""
        self.followers.stop()
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            link.close()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if not await self._ended(wait_s):
            for pid in self.followers.running():
                log.warning("worker %d did not stop in %g s: killed", pid, wait_s)
                self.followers.kill(pid)
            await self._ended(KILL_WAIT_S)

    async def _ended(self, wait_s: float) -> bool:
        """Whether every follower ended within `wait_s`."""
        deadline = time.monotonic() + wait_s
        while self.followers.running():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(STOP_POLL_S)
        return True

    async def follower_metrics(self) -> list[str]:
        """Each follower's own metrics (the exposition's text); one that does not answer in
        METRICS_WAIT_S is left out."""
        asked = [link.ask("metrics", METRICS_WAIT_S) for link in self._links]
        found = await asyncio.gather(*asked, return_exceptions=True)
        return [text for text in found if isinstance(text, str)]

    def workers(self) -> Workers:
        """The node's workers serving: this keeper, and each follower that said so."""
        return Workers(1 + len(self._serving), 1 + self.followers.count)

    def publish(self) -> None:
        """Tell each follower what changed since it was told last."""
        chains = {
            p: ChainNews(p, s.layers, s.level_images()) for p, s in self.catalog.current().items()
        }
        cluster = ClusterNews(
            self.view.current, self.coordinator.describe(), self.coordinator.connected
        )
        manifest = self.sync.manifest
        delivery = DeliveryNews(
            manifest.log_end, dict(self.sync.errors), manifest.store_rows, manifest.built
        )
        for link, heard in self._links.items():
            for message in _news(heard, chains, cluster, delivery):
                link.send(message)

    async def _publish_forever(self) -> None:
        while True:
            await self.switches.wait_past(self.switches.changes, PUBLISH_INTERVAL_S)
            self.publish()

    async def _watch_forever(self) -> None:
        """Kill each follower silent for STUCK_S of the time this keeper ran."""
        ran_since = woke = time.monotonic()
        while True:
            await asyncio.sleep(STUCK_CHECK_S)
            now = time.monotonic()
            if now - woke > STUCK_CHECK_S + LATE_S:
                ran_since = now
            woke = now
            for link, pid in list(self._pids.items()):
                silent = now - max(link.heard, ran_since)
                if silent > STUCK_S:
                    log.warning("worker %d said nothing for %.1f s: killed", pid, silent)
                    del self._pids[link]
                    self.followers.kill(pid)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = Link(reader, writer, lambda message: self._heard(link, message), self._answer)
        self._links[link] = _Heard()
        self._pids[link] = _peer_pid(writer)
        self.publish()
        link.send(Ready())
        try:
            await link.run()
        finally:
            self._links.pop(link, None)
            self._pids.pop(link, None)
            self._serving.discard(link)

    async def _heard(self, link: Link, message: Message) -> None:
        if isinstance(message, Serving):
            self._serving.add(link)
        elif not isinstance(message, Beat):  # a beat: the link noted when it came
            log.warning("a follower sent what only a keeper tells: %r", message)

    async def _answer(self, ask: Ask) -> Any:
        if ask.kind == "metrics":
            return (await self.metrics()).decode()
        if ask.kind == "workers":
            return dataclasses.asdict(self.workers())
        try:
            installed = await self.sync.run_once(force=True)
        except StoreUnreachable as exc:
            return {"unreachable": str(exc)}
        self.publish()  # the installs before the answer: the follower serves them once answered
        return {"installed": installed}


def _peer_pid(writer: asyncio.StreamWriter) -> int:
    """The process at the other end of a Unix socket (SO_PEERCRED: pid, uid, gid)."""
    creds = writer.get_extra_info("socket").getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
    )
    pid: int = struct.unpack("3i", creds)[0]
    return pid


def _news(
    heard: _Heard,
    chains: dict[int, ChainNews],
    cluster: ClusterNews,
    delivery: DeliveryNews,
) -> list[Message]:
    """What a follower that heard `heard` is to be told, and `heard` updated to it."""
    news: list[Message] = []
    if cluster != heard.cluster:
        heard.cluster = cluster
        news.append(cluster)
    if delivery != heard.delivery:
        heard.delivery = delivery
        news.append(delivery)
    for partition in sorted(set(heard.chains) - set(chains)):
        del heard.chains[partition]
        news.append(ChainNews(partition, None))
    for partition, chain in sorted(chains.items()):
        if heard.chains.get(partition) != chain:
            heard.chains[partition] = chain
            news.append(chain)
    return news
