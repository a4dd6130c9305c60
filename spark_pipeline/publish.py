"""The snapshot store: the folder the pipeline publishes snapshots and their manifest to.

<store>/p<partition>/v<version>.<kind>.duckdb   contracts/snapshot_file.py: one layer
<store>/manifest.json                           contracts/manifest.py: each partition's chain

Serving nodes read the manifest and copy the files they host; notify_nodes tells them to look.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson

from contracts import chains
from contracts.cluster_secret import secret_headers
from contracts.coordination import CoordinatorError, State, read_once
from contracts.manifest import Manifest
from contracts.project import Cluster, Node, Project
from contracts.snapshot_file import parse_file_name, partition_folder
from contracts.tls import Tls, verify
from snapshot_store import SnapshotStore
from snapshot_store.folder import FolderStore
from spark_pipeline.snapshot import temporary_of
from topics import Log, TopicsError

log = logging.getLogger(__name__)
NOTIFY_TIMEOUT = httpx.Timeout(30.0, connect=3.0)  # a sync may download; a connect may not
NOTIFYING_THREADS = 32  # nodes told at once by the continuous pipeline
PRUNE_GRACE_S = 60.0  # how long an unnamed layer stays for nodes still downloading it
# A temporary layer file untouched this long (with its WAL) was left by a writer killed while
# writing it (SIGKILL skips its cleanup); a live writer touches the WAL as it goes.
TEMPORARY_GRACE_S = 600.0


def prune(
    store_dir: Path,
    manifest: Manifest,
    grace_s: float = PRUNE_GRACE_S,
    object_store: SnapshotStore | None = None,
) -> list[str]:
    """Delete the layers no chain of the manifest names, once they are `grace_s` old (a node
    that read the previous manifest may still be downloading them), from the folder and the
    object store the pipeline publishes to; and the leftovers of killed writers
    (sweep_temporaries)."""
    removed = [] if object_store is None else unnamed(object_store, manifest, grace_s)
    removed += unnamed(FolderStore(store_dir), manifest, grace_s)
    return removed + [str(path) for path in sweep_temporaries(store_dir)]


def unnamed(store: SnapshotStore, manifest: Manifest, grace_s: float) -> list[str]:
    """Delete the store's layers the manifest does not name, once `grace_s` old."""
    named = {layer.path for entry in manifest.partitions.values() for layer in entry.layers}
    cutoff = time.time() - grace_s
    removed = []
    for partition in manifest.partitions:
        for found in store.listing(f"{partition_folder(partition)}/"):
            name = found.name.rpartition("/")[2]
            if parse_file_name(name) is None or found.name in named:
                continue
            if found.modified_s < cutoff:
                store.delete(found.name)
                removed.append(found.name)
    return removed


def sweep_temporaries(store_dir: Path, grace_s: float = TEMPORARY_GRACE_S) -> list[Path]:
    """Delete the temporary layer files (and their WALs) of every partition folder, published
    or not, whose newest part is `grace_s` old: a killed writer's leftovers, up to a whole
    partition for a compaction; a writer at work keeps its files fresh."""
    groups: dict[Path, list[Path]] = {}
    for folder in store_dir.glob("p[0-9]*"):
        for path in folder.iterdir() if folder.is_dir() else ():
            tmp = temporary_of(path)
            if tmp is not None:
                groups.setdefault(tmp, []).append(path)
    cutoff = time.time() - grace_s
    removed = []
    for parts in groups.values():
        with contextlib.suppress(FileNotFoundError):  # its writer renamed or removed it
            if max(part.stat().st_mtime for part in parts) < cutoff:
                for part in parts:
                    part.unlink(missing_ok=True)
                    removed.append(part)
    return removed


def mirror(project: Project, manifest: Manifest, events: Log) -> None:
    """Commit how far each topic partition is published to the log's consumer group, for
    the tools Kafka users watch (kafka-consumer-groups, lag exporters); a failure is a
    warning, never a stop: the manifest is what is published."""
    positions = [chains.position(project, manifest, p) for p in range(project.cluster.partitions)]
    by_topic = {t: {p: at[t] for p, at in enumerate(positions)} for t in project.topics}
    try:
        events.published(by_topic)
    except TopicsError as exc:
        log.warning("the published positions are not mirrored: %s", exc)


def notify_nodes(project: Project, partitions: set[int]) -> dict[str, str]:
    """POST /internal/sync to each node holding a changed partition now; "ok" or the error
    per node. Never raises: a node that is down pulls the manifest when it starts, and one
    not told pulls it at its next poll."""
    cluster = project.cluster
    nodes = _holders(project, partitions)
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(len(nodes), 16)) as pool:
        results = pool.map(lambda n: _notify(n, cluster), nodes)
        return {node.id: result for node, result in zip(nodes, results, strict=True)}


class Notifier:
    """Tells the nodes holding changed partitions to sync, in the background and each node
    on its own: a node that does not answer (down, or cut off by the network, where a call
    waits out its timeout) holds up only its own notifications, never the other nodes'. A
    node still busy with one is told once more when it answers, whatever changed meanwhile:
    a sync reads the whole manifest. How each node's notifications go is logged when it
    changes (a node down would otherwise log a line per micro-batch)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._pool = ThreadPoolExecutor(NOTIFYING_THREADS, thread_name_prefix="notify")
        self._lock = threading.Lock()
        self._due: set[int] = set()  # partitions published since the last dispatch began
        self._busy: set[str] = set()  # nodes being told now
        self._again: set[str] = set()  # nodes to tell again once they answer
        self._told: dict[str, str] = {}  # node -> how its last notification went

    def tell(self, partitions: set[int]) -> None:
        with self._lock:
            idle = not self._due
            self._due |= partitions
        if idle:
            self._pool.submit(self._dispatch)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _dispatch(self) -> None:
        with self._lock:
            partitions, self._due = self._due, set()
        for node in _holders(self.project, partitions):
            with self._lock:
                if node.id in self._busy:
                    self._again.add(node.id)
                    continue
                self._busy.add(node.id)
            self._pool.submit(self._tell, node)

    def _tell(self, node: Node) -> None:
        while True:
            self._record(node.id, _notify(node, self.project.cluster))
            with self._lock:
                if node.id not in self._again:
                    self._busy.discard(node.id)
                    return
                self._again.discard(node.id)

    def _record(self, node: str, outcome: str) -> None:
        before = self._told.get(node, "ok")
        self._told[node] = outcome
        if outcome != "ok" and before == "ok":
            log.warning("could not tell %s about new layers: %s", node, outcome)
        elif outcome == "ok" and before != "ok":
            log.info("told %s about new layers again", node)


_LAST_READ: dict[tuple[str, str], State] = {}  # (coordinator, cluster) -> its last state read


def _holders(project: Project, changed: set[int]) -> list[Node]:
    """The nodes that hold any of the `changed` chains: every node for a global one, else
    those serving or warming up its partition, as the project file places them or, with a
    coordinator, as its current assignment does. While the coordinator cannot be read (this
    process's member lost its quorum), as the last assignment read says: a notification is
    a hint, and without it replicas would diverge by a poll, so that one taking over from
    a lost active would refuse the tokens the active gave out."""
    cluster = project.cluster
    everyone = any(chains.is_global(project, chain) for chain in changed)
    partitions = {chains.partition(project, chain) for chain in changed}
    if cluster.coordinator is None:
        return [n for n in cluster.nodes if everyone or partitions & set(cluster.hosted_by(n.id))]
    known = (cluster.coordinator, cluster.name)
    try:
        state = _LAST_READ[known] = asyncio.run(
            read_once(cluster.coordinator, cluster.name, cluster.tls)
        )
    except CoordinatorError as exc:
        if known not in _LAST_READ:
            log.warning("not notifying the nodes: %s", exc)
            return []
        log.warning("notifying the nodes of the last assignment read: %s", exc)
        state = _LAST_READ[known]
    assignment = state.assignment
    return [
        Node(m.id, m.address, Path(), cluster.scheme)
        for m in state.members.values()
        if everyone or assignment is None or partitions & set(assignment.assigned_to(m.id))
    ]


def nodes_reading(project: Project) -> frozenset[str] | None:
    """The tables the nodes' schemas read (each node's /internal/status says them:
    gateway/cluster/status.py, `serving`); None when a node did not say (unreachable, or of
    a release before it): then no generation may be left out (contracts/generations.py)."""
    reading: set[str] = set()
    cluster = project.cluster
    for node in _holders(project, set(range(chains.count(project)))):
        try:
            response = _client(cluster.tls).get(
                f"{node.url}/internal/status", headers=secret_headers(cluster.secret)
            )
            serving = orjson.loads(response.content).get("serving") if response.is_success else None
        except (httpx.HTTPError, orjson.JSONDecodeError, AttributeError):
            serving = None
        if not isinstance(serving, list):
            log.info("keeping every generation: %s did not say what it reads", node.id)
            return None
        reading.update(str(table) for table in serving)
    return frozenset(reading)


@functools.cache
def _client(tls: Tls | None) -> httpx.Client:
    """One client for the process's notifications, shared by its threads: a client per call
    made a TLS context each time (~25 ms of the driver's CPU, three times a micro-batch)."""
    return httpx.Client(timeout=NOTIFY_TIMEOUT, verify=verify(tls))


def _notify(node: Node, cluster: Cluster) -> str:
    try:
        response = _client(cluster.tls).post(
            f"{node.url}/internal/sync", headers=secret_headers(cluster.secret)
        )
    except httpx.HTTPError as exc:  # any failure to reach it is reported, not raised
        return f"{type(exc).__name__}: {exc}"
    if response.is_success:
        return "ok"
    return f"HTTP {response.status_code}: {response.text[:200]}"
