"""The node's snapshots as it serves them: each partition's current Snapshot, installed,
settled, leased and released; its files and tables are the hub's (storage/catalog/hub.py).

A partition's Snapshot is its chain as served: a Base and the Overlay of the deltas above
it (storage/catalog/layers.py). A new delta makes a new Snapshot over the same Base and the
same levels, plus a level of its own (only the delta is read); `settle` later replaces it by
one whose newest levels are merged. A new base (a rebuild, or a compaction at the same
version) makes a new Base. A query leases the partition's current snapshot; installing a new
one switches the pointer at once and retires the old one, which is released when its last
lease ends; a level goes with the last snapshot that reads it, and a base with the last
snapshot over it. A query in flight therefore always finishes on the version it started with.

Partitions here are chains (contracts/chains.py): a partition's own id for its partitioned
stores, another for its global stores.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from contracts.clock import now_ms
from contracts.project import Project, Store, history_of
from contracts.snapshot_file import parse_file_name, partition_folder
from gateway.storage.catalog.hub import Base, DuckDBHub, SnapshotError
from gateway.storage.catalog.layers import (
    LayeredTable,
    LayerHeader,
    Level,
    LevelImage,
    LocalLayer,
    Overlay,
    merged,
    to_merge,
)
from gateway.storage.memory.key_runs import KeyRuns

log = logging.getLogger(__name__)
CLOSE_WAIT_S = 30.0  # the longest a stopping node waits for an install under way


@dataclass(eq=False)
class Snapshot:
    partition: int
    base: Base
    overlay: Overlay | None
    layers: tuple[LocalLayer, ...]  # the chain it serves, base first
    tables: dict[str, LayeredTable] = field(default_factory=dict)  # answerable from memory
    served_ms: int = field(default_factory=now_ms)  # installed at
    leases: int = 0
    retired: bool = False
    released: bool = False

    @property
    def version(self) -> int:
        return self.layers[-1].version

    @property
    def header(self) -> LayerHeader:
        return self.overlay.header if self.overlay else self.base.header

    @property
    def offsets(self) -> dict[str, int]:
        return self.header.offsets

    @property
    def created_ms(self) -> int:
        return self.header.created_ms

    @property
    def appended_ms(self) -> int | None:
        """When the newest record in this state was appended to the log (None: unknown)."""
        return self.layers[-1].newest_append_ms

    def runs(self, store: str) -> list[KeyRuns] | None:
        """A window store or a history indexed in memory, the base's then each level's;
        None when a layer could not index it."""
        base = self.base.runs.get(store)
        levels = self.overlay.runs(store) if self.overlay else []
        return None if base is None or levels is None else [base, *levels]

    def horizon(self, store: Store) -> int | None:
        """The earliest time a versioned store's history answers for (KIP-889): its stream
        time, the newest valid_from, minus the history (None: it holds no version)."""
        name = history_of(store).name
        found = [self.base.newest.get(name), self.overlay.newest(name) if self.overlay else None]
        times = [t for t in found if t is not None]
        return max(times) - store.history_ms if times else None

    def level_images(self) -> tuple[LevelImage, ...] | None:
        """Its levels as the node's workers map them; None when one has no image."""
        levels = self.overlay.levels if self.overlay else ()
        found = tuple(LevelImage(lv.image, lv.span) for lv in levels if lv.image is not None)
        return found if len(found) == len(levels) else None

    @property
    def order(self) -> tuple[int, int]:
        """Which of two snapshots of a partition is newer: the version, then the base's (a
        compaction makes a newer base at the same version)."""
        return self.version, self.layers[0].version


@dataclass
class Footprint:
    disk: int = 0  # bytes of the layer files
    memory: dict[str, int] = field(default_factory=dict)  # store -> bytes of its rows


def _replaces(snapshot: Snapshot, old: Snapshot, same_order: bool) -> bool:
    """Whether a snapshot installed replaces the partition's current one: a newer one, or
    with `same_order` the same version (over the keeper's settled levels, or opened again
    for stores declared since)."""
    return snapshot.order > old.order or (same_order and snapshot.order == old.order)


class SnapshotCatalog:
    def __init__(
        self,
        folder: Path,
        project: Project,
        threads: int,
        memory: str,
        owns_files: bool = True,
        images: bool = False,
    ) -> None:
        self.folder = folder
        self._hub = DuckDBHub(folder, project, threads, memory, owns_files, images)
        self._project = project
        self._lock = threading.Lock()
        self._current: dict[int, Snapshot] = {}
        self._working = 0  # installs and settles under way in sync threads
        self._idle = threading.Condition()

    def open_existing(self, partitions: list[int]) -> None:
        """Serve the newest chain of each hosted partition already on disk that opens."""
        for partition in partitions:
            for chain in self._chains_on_disk(partition):
                try:
                    self.install(partition, chain)
                    break
                except SnapshotError as exc:
                    log.warning("not serving %s: %s", chain[-1].path, exc)
        self._remove_strays(partitions)

    def _chains_on_disk(self, partition: int) -> list[list[LocalLayer]]:
        """Candidate chains, best first: each base with the consecutive deltas above it on
        disk, then the same base alone."""
        folder = self.folder / partition_folder(partition)
        found = [
            (parsed, path)
            for path in (folder.iterdir() if folder.is_dir() else ())
            if (parsed := parse_file_name(path.name)) is not None
        ]
        deltas = {v: path for (v, kind), path in found if kind == "delta"}
        chains = []
        for (version, _), path in sorted(
            ((p, path) for p, path in found if p[1] == "base"), reverse=True
        ):
            chain = [LocalLayer(version, "base", path)]
            while (nxt := chain[-1].version + 1) in deltas:
                chain.append(LocalLayer(nxt, "delta", deltas[nxt]))
            chains.append(chain)
            if len(chain) > 1:
                chains.append(chain[:1])
        return chains

    def install(
        self,
        partition: int,
        chain: list[LocalLayer],
        levels: Sequence[LevelImage] | None = None,
    ) -> Snapshot | None:
        """Serve a chain of verified files: only its new deltas are read when it extends the
        current chain, or with `levels` (the keeper's, a follower's install) none: its deltas
        are those levels, mapped. Returns the partition's current snapshot after it; None
        when the partition was handed over (`drop`) while the chain was read: it stays
        handed over, and what was read is let go (the base it extended may be detached)."""
        with self._work():
            return self._install(partition, chain, levels)

    def widen(self) -> list[int]:
        """Open again each chain served over a base opened before its declared stores changed
        (a reload declared more): over the same files, it serves the new stores the base has
        tables of. Returns the chains opened again."""
        opened = []
        for partition, snapshot in self.current().items():
            if not self._hub.outdated(snapshot.base, partition):
                continue
            try:
                self.install(partition, list(snapshot.layers))
            except SnapshotError as exc:
                log.warning("partition %s: not opened again: %s", partition, exc)
                continue
            opened.append(partition)
        return opened

    def _install(
        self, partition: int, chain: list[LocalLayer], levels: Sequence[LevelImage] | None
    ) -> Snapshot | None:
        current = self.get(partition)
        known = len(current.layers) if current else 0
        # a base opened before the chain's declared stores changed: opened again
        outdated = current is not None and self._hub.outdated(current.base, partition)
        reopened = current.base if current is not None and outdated else None
        if levels is not None:
            snapshot = self._mirror(partition, current, chain, tuple(levels), reopened)
            if snapshot is current:
                return current
        elif current is not None and not outdated and tuple(chain[:known]) == current.layers:
            if len(chain) == known:
                return current
            snapshot = self._extend(partition, current, chain)
        else:
            snapshot = self._load(partition, chain, reopened)
        with self._lock:
            old = self._current.get(partition)
            stale: Snapshot | None
            if old is not current or (
                old is not None and not _replaces(snapshot, old, levels is not None or outdated)
            ):
                stale = snapshot  # handed over or replaced meanwhile, or no newer
            else:
                if old is not None and old.order == snapshot.order:
                    snapshot.served_ms = old.served_ms  # the keeper's levels settled
                self._current[partition] = snapshot
                stale = old
            if stale is not None:
                stale.retired = True
            serving = self._current.get(partition)
        if stale is not None:
            self._release_if_unused(stale)
        return serving

    def _load(
        self, partition: int, chain: list[LocalLayer], reopened: Base | None = None
    ) -> Snapshot:
        base = self._hub.open_base(partition, chain[0], reopened)
        try:
            return self._over(partition, base, None, chain, chain[1:])
        except SnapshotError:
            if base.users == 0:
                self._close_base(base)
            raise

    def _mirror(
        self,
        partition: int,
        current: Snapshot | None,
        chain: list[LocalLayer],
        levels: tuple[LevelImage, ...],
        reopened: Base | None,
    ) -> Snapshot:
        """A snapshot of the chain over the keeper's levels, mapped from their images (those
        the current snapshot maps already, reused); the current one when it is that already.
        The base is opened again over `reopened` (an outdated one: hub.outdated)."""
        if sum(level.span for level in levels) != len(chain) - 1:
            raise SnapshotError(f"partition {partition}: the levels told are not the chain's")
        same_base = current is not None and reopened is None and current.layers[0] == chain[0]
        if current is not None and same_base:
            if current.layers == tuple(chain) and current.level_images() == levels:
                return current
            held = {lv.image: lv for lv in current.overlay.levels} if current.overlay else {}
            base = current.base
        else:
            held, base = {}, self._hub.open_base(partition, chain[0], reopened)
        mapped_now: list[Level] = []
        overlay: list[Level] = []
        deltas = chain[1:]
        try:
            for told in levels:
                found = held.get(told.path)
                if found is None:
                    found = self._hub.map(partition, told, deltas[: told.span], base.stores)
                    mapped_now.append(found)
                overlay.append(found)
                deltas = deltas[told.span :]
        except SnapshotError:
            for level in mapped_now:
                self._hub.drop(level)
            if base.users == 0:
                self._close_base(base)
            raise
        header = overlay[-1].header if overlay else None
        snapshot = self._snapshot(
            partition, base, Overlay(header, tuple(overlay)) if header else None, tuple(chain)
        )
        with self._lock:
            base.files.update(layer.path for layer in chain[1:])
        return snapshot

    def _extend(self, partition: int, current: Snapshot, chain: list[LocalLayer]) -> Snapshot:
        deltas = chain[len(current.layers) :]
        return self._over(partition, current.base, current.overlay, chain, deltas)

    def _over(
        self,
        partition: int,
        base: Base,
        previous: Overlay | None,
        chain: list[LocalLayer],
        deltas: list[LocalLayer],
    ) -> Snapshot:
        """A snapshot of `base` with `deltas` read into a level of their own above
        `previous`: only the deltas are read."""
        overlay = previous
        if deltas:
            header, level = self._hub.read(partition, deltas, base.stores)
            try:
                level.index(base.stores)
                level = self._hub.share(partition, level)
            except (duckdb.Error, pa.ArrowException) as exc:
                raise SnapshotError(f"partition {partition}: {exc}") from exc
            overlay = Overlay(header, (*(previous.levels if previous else ()), level))
        snapshot = self._snapshot(partition, base, overlay, tuple(chain))
        with self._lock:
            base.files.update(layer.path for layer in deltas)
        return snapshot

    def _snapshot(
        self,
        partition: int,
        base: Base,
        overlay: Overlay | None,
        layers: tuple[LocalLayer, ...],
    ) -> Snapshot:
        """A snapshot of these parts, counted as a user of its base and its levels."""
        snapshot = Snapshot(partition, base, overlay, layers)
        for name, table in base.tables.items():
            levels = overlay.lookups(name) if overlay else []
            if levels is not None:
                snapshot.tables[name] = LayeredTable(table, levels)
        with self._lock:
            base.users += 1
            for level in overlay.levels if overlay else ():
                level.users += 1
        return snapshot

    def settle(self) -> None:
        """Merge the newest levels of each partition's overlay where they have grown as
        large as the level below them (layers.to_merge), off the install's path: the merged
        snapshot serves the same version, and replaces the current one only if no install
        came in meanwhile. And delete the level images let go of LEVEL_DELETE_DELAY_S ago:
        the sync settles at each round, so a handed-over partition's images go then, not at
        whatever release comes next."""
        with self._work():
            self._settle()
        self._hub.delete_due()

    def _settle(self) -> None:
        for partition, snapshot in self.current().items():
            overlay = snapshot.overlay
            count = to_merge(overlay.levels) if overlay else 0
            if overlay is None or count < 2:
                continue
            kept, merging = overlay.levels[:-count], overlay.levels[-count:]
            try:
                stores = snapshot.base.stores
                level = merged(self._hub.alias(partition), merging, stores)
                level.index(stores)
                level = self._hub.share(partition, level)
            except (duckdb.Error, pa.ArrowException) as exc:
                log.warning("partition %s: levels not merged: %s", partition, exc)
                continue
            settled = self._snapshot(
                partition, snapshot.base, Overlay(overlay.header, (*kept, level)), snapshot.layers
            )
            settled.served_ms = snapshot.served_ms
            with self._lock:
                swapped = self._current.get(partition) is snapshot
                if swapped:
                    self._current[partition] = settled
                stale = snapshot if swapped else settled
                stale.retired = True
            self._release_if_unused(stale)

    def lease(self, partition: int) -> Lease:
        """The partition's snapshot (None: none is served), kept from release while leased."""
        return Lease(self, partition)

    def drop(self, partition: int, keep_files: bool = False) -> bool:
        """Stop serving a partition this node handed over; its files are deleted once the
        queries under way let go of it, but its layer files with `keep_files`. False when it
        served none."""
        with self._lock:
            snapshot = self._current.pop(partition, None)
            if snapshot is not None:
                snapshot.retired = True
                snapshot.base.keep = keep_files
        if snapshot is None:
            return False
        self._release_if_unused(snapshot)
        return True

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor on the hub (duckdb refuses one connection on two threads)."""
        return self._hub.cursor()

    def get(self, partition: int) -> Snapshot | None:
        """The partition's current snapshot (a single dict read: no lock needed)."""
        return self._current.get(partition)

    def current(self) -> dict[int, Snapshot]:
        with self._lock:
            return dict(self._current)

    def footprint(self, chains: Iterable[int]) -> Footprint:
        """What this node holds of `chains`: their layer files' bytes, and each store's rows
        in memory."""
        found = Footprint()
        for chain in chains:
            snapshot = self.get(chain)
            if snapshot is None:
                continue
            for layer in snapshot.layers:
                with contextlib.suppress(OSError):  # released meanwhile
                    found.disk += layer.path.stat().st_size
            for name, table in snapshot.tables.items():
                found.memory[name] = found.memory.get(name, 0) + table.nbytes
            for store in snapshot.base.stores:
                runs = snapshot.runs(store.name) if store.kind == "window" else None
                held = sum(r.nbytes for r in runs or ())
                found.memory[store.name] = found.memory.get(store.name, 0) + held
        return found

    def history_memory(self) -> dict[str, int]:
        """Each versioned store's history indexes this node holds, in bytes (bases and
        levels, each counted once)."""
        names = {history_of(s).name: s.name for s in self._project.stores.values() if s.versioned}
        found = dict.fromkeys(names.values(), 0)
        seen: set[int] = set()
        for snapshot in self.current().values():
            levels = snapshot.overlay.levels if snapshot.overlay else ()
            for runs in (snapshot.base.runs, *(level.runs for level in levels)):
                if id(runs) in seen:
                    continue
                seen.add(id(runs))
                for name, index in runs.items():
                    if name in names:
                        found[names[name]] += index.nbytes
        return found

    def version(self, partition: int) -> int:
        snapshot = self.get(partition)
        return snapshot.version if snapshot else 0

    def close(self) -> None:
        """Close the hub once the installs and settles under way have ended: a
        stopping node cancels its sync task, but not the thread that task was waiting on."""
        with self._idle:
            self._idle.wait_for(lambda: self._working == 0, timeout=CLOSE_WAIT_S)
        with self._lock:
            serving = [s.overlay.levels for s in self._current.values() if s.overlay]
        self._hub.close([lv.image for levels in serving for lv in levels if lv.image])

    @contextmanager
    def _work(self) -> Iterator[None]:
        with self._idle:
            self._working += 1
        try:
            yield
        finally:
            with self._idle:
                self._working -= 1
                self._idle.notify_all()

    def _taken(self, partition: int) -> Snapshot | None:
        with self._lock:
            snapshot = self._current.get(partition)
            if snapshot is not None:
                snapshot.leases += 1
        return snapshot

    def _given_back(self, snapshot: Snapshot) -> None:
        with self._lock:
            snapshot.leases -= 1
            if not snapshot.retired:  # the usual case: nothing to release
                return
        self._release_if_unused(snapshot)

    def _release_if_unused(self, snapshot: Snapshot) -> None:
        with self._lock:
            if not snapshot.retired or snapshot.leases > 0 or snapshot.released:
                return
            snapshot.released = True
            base = snapshot.base
            base.users -= 1
            base_done = base.users == 0
            unused = []
            for level in snapshot.overlay.levels if snapshot.overlay else ():
                level.users -= 1
                if level.users == 0:
                    unused.append(level)
        for level in unused:  # levels are shared by the snapshots of one chain
            self._hub.release(level)
        self._hub.delete_due()
        if base_done:
            self._close_base(base)

    def _close_base(self, base: Base) -> None:
        """Let go of a base no snapshot uses, with its files but those of the chains served
        (a base opened again over the same file shares its file and image)."""
        with self._lock:
            in_use = {layer.path for s in self._current.values() for layer in s.layers}
            in_use |= {path for s in self._current.values() for path in s.base.files}
        self._hub.close_base(base, in_use)

    def _remove_strays(self, partitions: list[int]) -> None:
        """Delete older versions and unfinished downloads left by an earlier run."""
        serving = {path for s in self.current().values() for path in s.base.files}
        serving |= {layer.path for s in self.current().values() for layer in s.layers}
        for partition in partitions:
            folder = self.folder / partition_folder(partition)
            if not folder.is_dir():
                continue
            for path in folder.iterdir():
                if path not in serving and (
                    parse_file_name(path.name) or path.name.startswith(".")
                ):
                    try:
                        os.unlink(path)
                    except OSError as exc:
                        log.warning("cannot remove %s: %s", path, exc)


class Lease:
    """A snapshot leased for the block (a class, not a generator: every read takes one)."""

    __slots__ = ("catalog", "partition", "snapshot")

    def __init__(self, catalog: SnapshotCatalog, partition: int) -> None:
        self.catalog = catalog
        self.partition = partition
        self.snapshot: Snapshot | None = None

    def __enter__(self) -> Snapshot | None:
        self.snapshot = self.catalog._taken(self.partition)
        return self.snapshot

    def __exit__(self, *exc: object) -> None:
        if self.snapshot is not None:
            self.catalog._given_back(self.snapshot)
