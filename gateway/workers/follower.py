"""A follower: a worker process of a node that serves its port beside the keeper
(gateway/workers/keeper.py) and holds what the keeper tells, instead of joining the cluster
and syncing itself. To the node it is both its coordinator (the topology, as the keeper
holds it) and its delivery (the chains, as the keeper serves them).

Each chain it hears it installs from the keeper's files: its deltas as the keeper's levels,
mapped from their images (a level without one is read from the deltas, as the keeper did).
A chain whose files are gone already is skipped: the keeper moved on, and tells the newer
chain next. A sync it is asked (the pipeline's notification landed on this worker) is the
keeper's, answered once this worker serves what that sync installed. Without its keeper it
stops, as the node does: when the channel closes, or when its lifeline says the keeper
stopped or is gone (gateway/workers/lifeline.py), whichever comes first, joined or not.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

from contracts import chains
from contracts.manifest import Built
from gateway.storage.catalog.hub import SnapshotError
from gateway.storage.catalog.layers import LevelImage, LocalLayer
from gateway.storage.delivery.node_core import NodeCore
from gateway.storage.delivery.sync import StoreUnreachable
from gateway.workers.channel import (
    BEAT_S,
    LINE_LIMIT,
    Ask,
    Beat,
    ChainNews,
    ChannelError,
    ClusterNews,
    DeliveryNews,
    Link,
    Message,
    Ready,
    Serving,
)
from gateway.workers.lifeline import Lifeline
from gateway.workers.roles import ONE_WORKER, Workers

log = logging.getLogger(__name__)
CONNECT_POLL_S = 0.1  # the keeper opens its channel once it started: until then, tried again
SYNC_WAIT_S = 120.0  # the longest a sync asked of the keeper may take
METRICS_WAIT_S = 5.0  # a scrape (the keeper waits for each follower's, 2 s at most), /ready


class Follower:
    def __init__(
        self,
        address: str,
        lifeline: Lifeline,
        core: NodeCore,
        metrics: Callable[[], bytes],
        tables_built: Callable[[Built | None], None],
    ) -> None:
        self.address = address
        self.lifeline = lifeline
        self.project = core.project
        self.node_id = core.node_id
        self.catalog = core.catalog
        self.view = core.topology
        self.switches = core.switches
        self.metrics = metrics  # this worker's own
        self._tables_built = tables_built
        self.connected = True
        self.errors: dict[int, str] = {}
        self._described: dict[str, Any] = {}
        self._log_end: dict[str, dict[int, int]] = {}
        self._store_rows: dict[str, int] = {}
        self._ready = asyncio.Event()
        self._stopping = False
        self._link: Link | None = None
        self._task: asyncio.Task[None] | None = None

    # -- as the node's coordinator

    async def start(self) -> None:
        """Once this worker serves the keeper's state as it was when the channel opened, or
        once it heard its keeper's end (it stops then: its lifeline ends it)."""
        connected = await self._connect()
        if connected is None:
            return
        self._link = Link(*connected, self._heard, self._answer)
        self._task = asyncio.create_task(self._follow(self._link))
        ready = asyncio.create_task(self._ready.wait())
        await asyncio.wait([ready, self._task], return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        self._link.send(Serving())  # its server listens once this start returns

    async def stop(self) -> None:
        self._stopping = True
        if self._link is not None:
            self._link.close()

    def describe(self) -> dict[str, Any]:
        return self._described

    # -- as the node's delivery

    def held(self) -> list[int]:
        return chains.held(self.project, self.view.current.assigned_to(self.node_id))

    async def run_once(self, force: bool = False) -> dict[int, int]:
        """The keeper's sync: the chains it installed (chain -> version), served here."""
        if self._link is None:
            return {}
        try:
            answer = await self._link.ask("sync", SYNC_WAIT_S)
        except (ChannelError, TimeoutError) as exc:
            raise StoreUnreachable(f"this node's keeper did not sync: {exc}") from exc
        if "unreachable" in answer:
            raise StoreUnreachable(answer["unreachable"])
        return {int(chain): version for chain, version in answer["installed"].items()}

    async def run_forever(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)

    async def node_metrics(self) -> bytes:
        """The node's metrics, as the keeper sums them."""
        if self._link is None:
            return self.metrics()
        text: str = await self._link.ask("metrics", METRICS_WAIT_S)
        return text.encode()

    async def workers(self) -> Workers:
        """The node's workers serving, as the keeper counts them."""
        if self._link is None:
            return ONE_WORKER
        try:
            return Workers(**await self._link.ask("workers", METRICS_WAIT_S))
        except (ChannelError, TimeoutError):
            return ONE_WORKER

    def log_end(self, topic: str, partition: int) -> int | None:
        return self._log_end.get(topic, {}).get(partition)

    def store_rows(self) -> dict[str, int]:
        return self._store_rows

    def hand_over(self, partition: int) -> None:
        """The keeper tells what it handed over."""

    # -- the channel

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The channel, once the keeper opens it; None once the keeper stopped or is gone."""
        while not self.lifeline.cut.is_set():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.address)  # local: at once (uvloop refuses abstract paths)
                return await asyncio.open_unix_connection(sock=sock, limit=LINE_LIMIT)
            except (ConnectionRefusedError, FileNotFoundError):
                sock.close()
                await asyncio.sleep(CONNECT_POLL_S)
        return None

    async def _follow(self, link: Link) -> None:
        beating = asyncio.create_task(self._beat(link))
        try:
            await link.run()
        finally:
            beating.cancel()
        if not self._stopping:
            self.lifeline.end()  # the server's own graceful stop

    async def _beat(self, link: Link) -> None:
        """Tell the keeper that this worker's loop runs: it kills one silent too long."""
        while True:
            link.send(Beat())
            await asyncio.sleep(BEAT_S)

    async def _heard(self, message: Message) -> None:
        try:
            await self._apply(message)
        except Exception:  # a bug must not end following for good: the next chain may serve
            log.exception("applying the keeper's %s failed", type(message).__name__)

    async def _apply(self, message: Message) -> None:
        match message:
            case ChainNews(partition, layers, levels):
                await self._serve(partition, layers, levels)
            case ClusterNews(topology, described, connected):
                self.view.update(topology)
                self._described, self.connected = described, connected
            case DeliveryNews(log_end, errors, store_rows, built):
                self._log_end, self.errors, self._store_rows = log_end, errors, store_rows
                self._tables_built(built)  # told before the chains that hold them
            case Ready():
                self._ready.set()

    async def _answer(self, ask: Ask) -> Any:
        if ask.kind == "metrics":
            return self.metrics().decode()
        return None

    async def _serve(
        self,
        partition: int,
        layers: tuple[LocalLayer, ...] | None,
        levels: tuple[LevelImage, ...] | None,
    ) -> None:
        shown = chains.partition(self.project, partition)
        if layers is None:
            if self.catalog.drop(partition):
                self.switches.dropped(shown)
            return
        before = self.catalog.get(partition)
        try:
            serving = await asyncio.to_thread(self.catalog.install, partition, list(layers), levels)
        except SnapshotError as exc:
            log.info("partition %s: a chain the keeper moved on from: %s", partition, exc)
            return
        if serving is not None and (before is None or serving.version != before.version):
            self.switches.installed(shown)
        if levels is None:  # its own levels: merged here (the keeper's are merged there)
            await asyncio.to_thread(self.catalog.settle)
