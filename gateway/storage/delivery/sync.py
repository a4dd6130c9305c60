"""Delivery: a node pulls the snapshots of the partitions it hosts, and of every partition
of the global stores (contracts/chains.py), from the snapshot store.

The store is a folder or a bucket on the S3 API (snapshot_store/). A file is downloaded under a
hidden name in the node's own data directory, its size and sha256 are checked against the
manifest, and only then is it renamed and attached; anything else is deleted and the
previous version keeps serving. A version that failed is tried again after a backoff that
doubles per attempt (from `sync_interval_s` up to a minute), not on every sync: a damaged
file in the store must not be downloaded every two seconds. An explicit sync (the
pipeline's notification, POST /internal/sync) tries at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from contracts import chains, tracing
from contracts.clock import now_ms
from contracts.freshness import Delays
from contracts.manifest import FILE_NAME, Built, Layer, Manifest, PartitionEntry
from contracts.snapshot_file import FormatError, parse_file_name, partition_folder, relative_path
from gateway.storage.catalog.hub import SnapshotError
from gateway.storage.catalog.layers import LocalLayer
from gateway.storage.delivery.node_core import NodeCore
from snapshot_store import SnapshotStore, StoreError, open_store

log = logging.getLogger(__name__)
MIB = 1 << 20
# How long a partition handed over is still served here: a peer whose view of the assignment
# is older than this node's (a second behind, or just back from a network partition) still
# finds its data, and an assignment that gives it straight back fetches nothing again.
LINGER_S = 10.0


class DeliveryError(Exception):
    """A snapshot that did not arrive intact."""


class StoreUnreachable(Exception):
    """The snapshot store could not be read: down, or a manifest this node cannot read."""


@dataclass
class _Refusal:
    """A manifest entry that failed to install, and when to try it again."""

    sha256: str
    attempts: int
    retry_at: float  # time.monotonic()


@dataclass(frozen=True)
class _Linger:
    """A partition handed over and still served: until when, and whether this node was away
    (its lease expired) when it was taken away."""

    until: float  # time.monotonic()
    away: bool


class SnapshotSync:
    def __init__(
        self,
        core: NodeCore,
        tables_built: Callable[[Built | None], None] = lambda built: None,
        freshness: Delays | None = None,
    ) -> None:
        self.project = core.project
        self.node_id = core.node_id
        self.topology = core.topology
        self.catalog = core.catalog
        self.switches = core.switches
        self.freshness = freshness or Delays()
        self._tables_built = tables_built
        self.manifest = Manifest()
        self.errors: dict[int, str] = {}
        self._refused: dict[int, _Refusal] = {}
        self._on_disk: frozenset[int] = frozenset()  # unserved partitions whose base is here
        self._lingering: dict[int, _Linger] = {}  # handed over, still served until it ends
        self._lock = asyncio.Lock()
        self._store: SnapshotStore = open_store(core.project.snapshot_url)
        self.synced_at = time.monotonic()  # when its last round ended (delivery/lateness.py)

    async def run_once(self, force: bool = False) -> dict[int, int]:
        """Install every newer version the manifest lists; returns partition -> version.
        Versions that failed before wait for their backoff unless `force`."""
        async with self._lock:
            self.manifest = await self._read_manifest()
            self._tables_built(self.manifest.built)  # the tables the chains below hold
            installed: dict[int, int] = {}
            too_large = self._global_excess()
            for partition in self.held():
                entry = self.manifest.partitions.get(partition)
                if entry is None or not self._is_newer(partition, entry):
                    continue
                if too_large and chains.is_global(self.project, partition):
                    self.errors[partition] = too_large
                    continue
                refusal = self._refused.get(partition)
                if refusal is not None and refusal.sha256 != entry.top.sha256:
                    refusal = None  # a new file: its own first attempt
                if refusal is not None and not force and time.monotonic() < refusal.retry_at:
                    continue
                try:
                    await self._install(partition, entry)
                except (DeliveryError, SnapshotError) as exc:
                    self._refuse(partition, entry, refusal, exc)
                else:
                    self.errors.pop(partition, None)
                    self._refused.pop(partition, None)
                    installed[partition] = entry.version
            self._let_go_of_unassigned()
            await asyncio.to_thread(self.catalog.settle)  # after the installs are served
            await asyncio.to_thread(self._sweep)
            self.synced_at = time.monotonic()
            return installed

    def _global_excess(self) -> str | None:
        """Why the manifest's global chains may not be held here, if they may not: together
        they are larger than max_global_mb."""
        limit = self.project.settings.max_global_mb
        size = sum(
            layer.size
            for chain in chains.global_chains(self.project)
            if (entry := self.manifest.partitions.get(chain)) is not None
            for layer in entry.layers
        )
        if size <= limit * MIB:
            return None
        return (
            f"the global stores' layers take {size / MIB:.1f} MiB, over max_global_mb "
            f"({limit}): not installed"
        )

    def held(self) -> list[int]:
        """The chains this node holds (contracts/chains.py): its partitions', and every
        global one."""
        return chains.held(self.project, self.topology.current.assigned_to(self.node_id))

    def holding(self) -> frozenset[int]:
        """The partitions whose data this node has: those it serves, and those whose base, as
        the manifest names it, is on its disk (kept, or left by an earlier run). Given one of
        those, it fetches only the layers it lacks."""
        served = {p for p in self.catalog.current() if not chains.is_global(self.project, p)}
        return self._on_disk.union(served)

    def hand_over(self, partition: int) -> None:
        """Stop holding a partition: it is still served for LINGER_S, for the peers that do
        not know of the move yet, then dropped (`_let_go_of_unassigned`) unless it was given
        back meanwhile."""
        if partition in self.catalog.current() and partition not in self._lingering:
            away = self.topology.current.away(self.node_id)
            self._lingering[partition] = _Linger(time.monotonic() + LINGER_S, away)

    def _drop(self, partition: int, away: bool) -> None:
        """Stop serving a partition; its files go once the queries under way let go of it.
        An assignment made while this node was away (its lease expired) may give the
        partition back once the node is registered again: its layer files stay then, as an
        earlier run's do (`_sweep`)."""
        on_disk = self._on_disk | {partition} if away else self._on_disk - {partition}
        self._on_disk = on_disk  # a whole set replaced: `_sweep` runs in a thread
        if self.catalog.drop(partition, keep_files=away):
            kept = " (its files kept: this node was away)" if away else ""
            log.info("partition %s handed over%s", partition, kept)
            self.switches.dropped(chains.partition(self.project, partition))

    def _let_go_of_unassigned(self) -> None:
        """Drop what was handed over LINGER_S ago and not given back, and hand over what an
        install finished after the assignment took it away (the download began while this
        node still held the partition)."""
        held = set(self.held())
        for partition in set(self._lingering) & held:
            del self._lingering[partition]  # given back: served on, its files reused
        for partition in sorted(set(self.catalog.current()) - held):
            self.hand_over(partition)
            linger = self._lingering[partition]
            if time.monotonic() >= linger.until:
                del self._lingering[partition]
                self._drop(partition, linger.away or self.topology.current.away(self.node_id))

    def _refuse(
        self, partition: int, entry: PartitionEntry, last: _Refusal | None, exc: Exception
    ) -> None:
        settings = self.project.settings
        attempts = last.attempts + 1 if last else 1
        delay = min(settings.sync_interval_s * 2 ** (attempts - 1), settings.sync_max_backoff_s)
        self._refused[partition] = _Refusal(entry.top.sha256, attempts, time.monotonic() + delay)
        self.errors[partition] = (
            f"version {entry.version}: {exc} (attempt {attempts}, next in {delay:g} s)"
        )
        log.warning("partition %s not updated: %s", partition, self.errors[partition])

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.project.settings.sync_interval_s)
            try:
                await self.run_once()
            except StoreUnreachable as exc:
                log.warning("snapshot store unreachable: %s", exc)
            except Exception:  # a bug must not end syncing for good
                log.exception("syncing snapshots failed")

    def log_end(self, topic: str, partition: int) -> int | None:
        """The log end offset the pipeline saw when it last published."""
        return self.manifest.log_end.get(topic, {}).get(partition)

    def store_rows(self) -> dict[str, int]:
        """Each store's rows in the cluster, as the manifest bounds them."""
        return self.manifest.store_rows

    async def _read_manifest(self) -> Manifest:
        try:
            found = await asyncio.to_thread(self._store.read, FILE_NAME)
            return Manifest() if found is None else Manifest.from_json(found[0])
        except (FormatError, OSError, StoreError) as exc:
            raise StoreUnreachable(str(exc)) from exc

    def _is_newer(self, partition: int, entry: PartitionEntry) -> bool:
        """Whether the manifest's chain is newer than the one served: a higher version, or a
        newer base at the same version (a compaction)."""
        snapshot = self.catalog.get(partition)
        return snapshot is None or (entry.version, entry.base.version) > snapshot.order

    async def _install(self, partition: int, entry: PartitionEntry) -> None:
        """Download the chain's layers this node lacks, check them, and serve the chain; a
        child span of the top layer's publication, when the pipeline traced it."""
        publication = tracing.following(entry.top.traceparent)
        served = self.catalog.get(partition)
        if publication is None or (served is not None and served.version >= entry.version):
            return await self._serve(partition, entry)  # untraced, or a compaction
        installing = {
            "stategate.partition": chains.partition(self.project, partition),
            "stategate.chain": partition,
            "stategate.version": entry.version,
            "stategate.node": self.node_id,
        }
        with tracing.span("install", installing, publication):
            await self._serve(partition, entry)

    async def _serve(self, partition: int, entry: PartitionEntry) -> None:
        chain: list[LocalLayer] = []
        fetched: list[Path] = []
        served = self.catalog.get(partition)
        have = {layer.path for layer in served.layers} if served else set()
        try:
            for layer in entry.layers:
                path = self._local_path(partition, layer)
                local = LocalLayer(
                    layer.version, layer.kind, path, layer.newest_append_ms, layer.traceparent
                )
                if local.path not in have and not await asyncio.to_thread(
                    _intact, local.path, layer
                ):
                    await self._download(layer, local.path)
                    fetched.append(local.path)
                chain.append(local)
            version = served.version if served else None
            serving = await asyncio.to_thread(self.catalog.install, partition, chain)
        except (DeliveryError, SnapshotError):
            for path in fetched:
                path.unlink(missing_ok=True)
            raise
        if serving is None:
            return  # handed over while it was read
        if serving.version != version:  # a compacted chain at the same version changes nothing
            self.switches.installed(chains.partition(self.project, partition))
            if version is not None:
                self._count_fresh(entry, version)

    def _count_fresh(self, entry: PartitionEntry, served: int) -> None:
        """Count the records of the layers just installed above version `served` by their
        delay to each stage. A partition's first install is left out: its records are as
        old as the log, not late."""
        installed = now_ms()
        for layer in entry.layers:
            if layer.version > served:
                self.freshness.observe_all(
                    layer.appended, {**layer.stages(), "installed": installed}
                )

    def _sweep(self) -> None:
        """Delete the layer files of partitions this node does not serve, but those the
        manifest still names: a partition that comes back (a node restarted, or back from an
        absence, after its replicas moved) reuses them instead of fetching them again."""
        served = set(self.catalog.current())
        on_disk = set()
        for partition in range(chains.count(self.project)):
            folder = self.catalog.folder / partition_folder(partition)
            if partition in served or not folder.is_dir():
                continue
            entry = self.manifest.partitions.get(partition)
            named = {self._local_path(partition, x) for x in entry.layers} if entry else set()
            for path in folder.iterdir():
                if parse_file_name(path.name) is not None and path not in named:
                    path.unlink(missing_ok=True)
            if entry is not None and entry.base.sized(self._local_path(partition, entry.base)):
                on_disk.add(partition)
        self._on_disk = frozenset(p for p in on_disk if not chains.is_global(self.project, p))

    def _local_path(self, partition: int, layer: Layer) -> Path:
        """Where a layer goes on this node: named by the node, never by the manifest."""
        return self.catalog.folder / relative_path(partition, layer.version, layer.kind)

    async def _download(self, layer: Layer, final: Path) -> None:
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.parent / f".incoming-{final.name}"
        try:
            digest, size = await self._fetch(layer.path, tmp)
            if size != layer.size or digest != layer.sha256:
                raise DeliveryError(
                    f"checksum mismatch: got {size} bytes sha256 {digest[:12]}, "
                    f"manifest says {layer.size} bytes sha256 {layer.sha256[:12]}"
                )
            os.rename(tmp, final)
        except (OSError, StoreError) as exc:
            raise DeliveryError(f"cannot copy {layer.path}: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)

    async def _fetch(self, relative: str, target: Path) -> tuple[str, int]:
        """Copy one file of the store to target; returns its sha256 and size. The download,
        hashing and fsync run in a worker thread, never on the event loop."""
        return await asyncio.to_thread(_pull, self._store, relative, target)


def _intact(path: Path, layer: Layer) -> bool:
    """Whether a file on disk is the layer the manifest names (size and sha256)."""
    try:
        if path.stat().st_size != layer.size:
            return False
        with open(path, "rb") as file:
            return hashlib.file_digest(file, "sha256").hexdigest() == layer.sha256
    except OSError:
        return False


def _pull(store: SnapshotStore, relative: str, target: Path) -> tuple[str, int]:
    """Download one object of the store to target; its sha256 and size as written."""
    store.download(relative, target)
    with open(target, "rb+") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
        _sync(file)
        return digest, file.tell()


def _sync(out: BinaryIO) -> None:
    out.flush()
    os.fsync(out.fileno())
