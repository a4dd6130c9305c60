"""The keeper: the one process of a node that joins the cluster, syncs and installs, and
tells its followers (gateway/workers/follower.py) what it serves as it changes.

A follower hears every chain the keeper serves as the list of its layer files, and its
deltas as the keeper's levels, whose images it maps (gateway/storage/layers.py: one copy of
each level, one read and merge of each delta, whatever the workers). The keeper alone
deletes files; a follower that finds one gone (the keeper moved on meanwhile) waits for the
newer chain that made it go, which the keeper tells next. What it tells is each follower's
difference from what it last heard: at once after a switch or an asked sync, and at least
every PUBLISH_INTERVAL_S (levels merged, a compaction at the same version, the coordinator's
and the store's state).

A stopping keeper cuts its followers' lifeline (gateway/workers/lifeline.py) and closes the
channel, and waits for every follower it started, joined or not: each lets its requests
under way finish, and one still there after that is killed. So a stopped node leaves no
process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.cluster.coordinator import Coordinator
from gateway.model.topology import TopologyView
from gateway.storage.snapshots import SnapshotCatalog
from gateway.storage.switches import Switches
from gateway.storage.sync import SnapshotSync, StoreUnreachable
from gateway.workers.channel import (
    LINE_LIMIT,
    Ask,
    Chain,
    Cluster,
    Delivery,
    Link,
    Message,
    Ready,
)
from gateway.workers.roles import Followers

log = logging.getLogger(__name__)
PUBLISH_INTERVAL_S = 1.0
METRICS_WAIT_S = 2.0  # how long a scrape waits for each follower's metrics
STOP_POLL_S = 0.05
KILL_WAIT_S = 5.0  # a follower killed ends at once: this long is a bug's, not a wait's


@dataclass
class _Heard:
    """What one follower was told last."""

    chains: dict[int, Chain] = field(default_factory=dict)
    cluster: Cluster | None = None
    delivery: Delivery | None = None


class Keeper:
    def __init__(
        self,
        address: str,
        followers: Followers,
        catalog: SnapshotCatalog,
        view: TopologyView,
        coordinator: Coordinator,
        sync: SnapshotSync,
        switches: Switches,
        metrics: Callable[[], Awaitable[bytes]],  # the node's, every worker's summed
    ) -> None:
        self.address = address
        self.followers = followers
        self.catalog = catalog
        self.view = view
        self.coordinator = coordinator
        self.sync = sync
        self.switches = switches
        self.metrics = metrics
        self._links: dict[Link, _Heard] = {}
        self._server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.address)  # abstract: uvloop refuses such a path itself
        self._server = await asyncio.start_unix_server(self._serve, sock=sock, limit=LINE_LIMIT)
        self._tasks.append(asyncio.create_task(self._publish_forever()))

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

    def publish(self) -> None:
        """Tell each follower what changed since it was told last."""
        chains = {
            p: Chain(p, s.layers, s.level_images()) for p, s in self.catalog.current().items()
        }
        cluster = Cluster(
            self.view.current, self.coordinator.describe(), self.coordinator.connected
        )
        manifest = self.sync.manifest
        delivery = Delivery(manifest.log_end, dict(self.sync.errors), manifest.store_rows)
        for link, heard in self._links.items():
            for message in _news(heard, chains, cluster, delivery):
                link.send(message)

    async def _publish_forever(self) -> None:
        while True:
            await self.switches.wait_past(self.switches.changes, PUBLISH_INTERVAL_S)
            self.publish()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = Link(reader, writer, self._heard, self._answer)
        self._links[link] = _Heard()
        self.publish()
        link.send(Ready())
        try:
            await link.run()
        finally:
            self._links.pop(link, None)

    async def _heard(self, message: Message) -> None:
        log.warning("a follower sent what only a keeper tells: %r", message)

    async def _answer(self, ask: Ask) -> Any:
        if ask.kind == "metrics":
            return (await self.metrics()).decode()
        try:
            installed = await self.sync.run_once(force=True)
        except StoreUnreachable as exc:
            return {"unreachable": str(exc)}
        self.publish()  # the installs before the answer: the follower serves them once answered
        return {"installed": installed}


def _news(
    heard: _Heard,
    chains: dict[int, Chain],
    cluster: Cluster,
    delivery: Delivery,
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
        news.append(Chain(partition, None))
    for partition, chain in sorted(chains.items()):
        if heard.chains.get(partition) != chain:
            heard.chains[partition] = chain
            news.append(chain)
    return news
