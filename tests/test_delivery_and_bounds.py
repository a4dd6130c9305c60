"""Snapshots reach each node's own data directory only through the snapshot store, here a
bucket on a real S3 server shared with no folder; bounds and consistency tokens pick
replicas that are fresh enough, or say NOT_UP_TO_BOUND."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from contracts import chains
from contracts.cluster_secret import SECRET_HEADER
from contracts.manifest import FILE_NAME
from contracts.positions import decode_token, encode_token
from contracts.project import Project
from contracts.snapshot_file import partition_folder, relative_path
from contracts.topology import Topology
from gateway.model.topology_view import TopologyView
from gateway.storage.catalog.snapshots import SnapshotCatalog
from gateway.storage.delivery import sync as delivery_sync
from gateway.storage.delivery.lateness import LATE_WARN_S
from gateway.storage.delivery.node_core import NodeCore
from gateway.storage.delivery.switches import Switches
from gateway.storage.delivery.sync import SnapshotSync
from gateway.wire.peers import PeerClient, pooled
from snapshot_store import open_store
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate.s3server import S3Server
from tests import oracle, wire
from tests.nodes import Served, metric, serve
from tests.projects import produce_test_events

SCAN = """query($c: ConsistencyInput) {
  trainDelaysRange(first: 1000, consistency: $c) {
    records { key reports totalDelay }
    meta { partial consistencyToken
           partitions { partition node role version failure message position { offset } } }
  }
}"""


@pytest.fixture(scope="module")
def remote(
    spark: LazySpark, s3: S3Server, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Served, S3Server]]:
    url = f"{s3.bucket('snapshots')}/remote"
    cluster = serve(tmp_path_factory.mktemp("remote"), spark, seed=3, snapshot_url=url, start=False)
    for node in cluster.nodes.ids:
        cluster.nodes.start(node)
    yield cluster, s3
    cluster.nodes.stop_all()


def scan(cluster: Served, node: str, consistency: dict[str, Any] | None = None) -> dict:
    data = cluster.nodes.data(node, SCAN, {"c": consistency})
    return data["trainDelaysRange"]


def top(manifest: dict, partition: int) -> dict:
    """A partition's newest layer in a manifest."""
    layer: dict = manifest["partitions"][str(partition)]["layers"][-1]
    return layer


def failures(answer: dict) -> list[tuple[int, str, str]]:
    """The failed partitions of an answer, with reason and message, for assertions."""
    parts = answer["meta"]["partitions"]
    return [(p["partition"], p["failure"], p["message"]) for p in parts if p["failure"]]


def test_each_node_holds_exactly_its_partitions_pulled_from_the_bucket(remote) -> None:
    cluster, _ = remote
    replica_map = cluster.project.cluster.replica_map
    for node in cluster.project.cluster.nodes:
        folder = node.data_dir / "snapshots"
        files = sorted(str(p.relative_to(folder)) for p in folder.glob("p*/v*"))
        hosted = [p for p, ids in replica_map.items() if node.id in ids]
        held = chains.held(cluster.project, hosted)  # and every global chain
        assert files == [relative_path(p, 1, "base") for p in held]
    expected = sorted(
        r for rows in oracle.expected_store(cluster.project, "trainDelays").values() for r in rows
    )
    for node in cluster.nodes.ids:
        records = scan(cluster, node)["records"]
        got = [
            (r["key"], wire.long(r["reports"]), wire.maybe_long(r["totalDelay"])) for r in records
        ]
        assert got == [r[:3] for r in expected]


def test_the_bucket_refuses_calls_without_its_credentials(remote) -> None:
    cluster, s3 = remote
    url = f"{s3.endpoint}/snapshots/remote/manifest.json"
    assert httpx.get(url).status_code == 403
    assert open_store(cluster.project.snapshot_url).read(FILE_NAME) is not None


def test_bounds_tokens_require_active_and_max_lag(remote, spark: LazySpark) -> None:
    cluster, store = remote
    before = scan(cluster, "node1")
    cluster.nodes.kill("node3")
    produce_test_events(
        cluster.project, seed=4, n_bookings=200, n_trains=300, start_ms=1_767_312_000_000
    )
    report = job.run(cluster.project, spark, notify=True)
    assert report.notify["node3"] != "ok" and report.notify["node1"] == "ok"
    store.kill()
    cluster.nodes.start("node3")  # the store is down: node3 serves the versions it has
    unreachable = httpx.post(
        f"{cluster.nodes.url('node3')}/internal/sync",
        headers={SECRET_HEADER: cluster.project.cluster.secret},
        timeout=30,
    )
    assert unreachable.status_code == 502, unreachable.text
    assert unreachable.json()["error"]["code"] == "STORE_UNREACHABLE"

    fresh = scan(cluster, "node1")
    token = fresh["meta"]["consistencyToken"]
    assert all(p["version"] == 2 for p in fresh["meta"]["partitions"])
    bound = decode_token(token)
    assert all(
        bound[("trains", p)] > o
        for (t, p), o in decode_token(before["meta"]["consistencyToken"]).items()
        if t == "trains"
    )

    # The token, sent to the stale node, is served by up-to-date replicas only.
    via_node3 = scan(cluster, "node3", {"token": token})
    assert not failures(via_node3)
    assert "node3" not in {p["node"] for p in via_node3["meta"]["partitions"]}
    assert via_node3["records"] == fresh["records"]
    assert decode_token(via_node3["meta"]["consistencyToken"]) == bound

    # Without a bound node3 answers from its own (older) snapshots where it can.
    unbound = scan(cluster, "node3")
    assert {p["version"] for p in unbound["meta"]["partitions"] if p["node"] == "node3"} == {1}

    # requireActive: node3 is the only active of 2, 5, 8, and it is behind the token.
    active = scan(cluster, "node3", {"token": token, "requireActive": True})
    failed = {p["partition"]: p["failure"] for p in active["meta"]["partitions"] if p["failure"]}
    assert failed == {2: "NOT_UP_TO_BOUND", 5: "NOT_UP_TO_BOUND", 8: "NOT_UP_TO_BOUND"}
    assert active["meta"]["partial"]
    assert all(p["role"] == "ACTIVE" for p in active["meta"]["partitions"] if not p["failure"])

    # maxLag 0 from node3: its own stale partitions are skipped for up-to-date replicas.
    # (A Long is read from a decimal string, and from an integer as well.)
    lagless = scan(cluster, "node3", {"maxLag": "0"})
    assert not failures(lagless)
    assert all(p["version"] == 2 for p in lagless["meta"]["partitions"])
    strict = scan(cluster, "node3", {"maxLag": 0, "requireActive": True})
    assert {p["partition"] for p in strict["meta"]["partitions"] if p["failure"]} == {2, 5, 8}

    # maxAgeMs: an age between the two builds leaves exactly the version-2 replicas.
    built: dict[int, list[int]] = {1: [], 2: []}
    for node in cluster.nodes.ids:
        for state in cluster.nodes.status(node)["partitions"].values():
            built[state["version"]].append(state["created_ms"])
    newest_v1, oldest_v2 = max(built[1]), min(built[2])
    assert oldest_v2 > newest_v1
    max_age = int(time.time() * 1000) - (newest_v1 + oldest_v2) // 2
    young = scan(cluster, "node3", {"maxAgeMs": str(max_age)})
    assert not failures(young)
    assert all(p["version"] == 2 for p in young["meta"]["partitions"])
    assert young["records"] == fresh["records"]
    young_active = scan(cluster, "node3", {"maxAgeMs": max_age, "requireActive": True})
    refused = failures(young_active)
    assert [(p, reason) for p, reason, _ in refused] == [
        (2, "NOT_UP_TO_BOUND"),
        (5, "NOT_UP_TO_BOUND"),
        (8, "NOT_UP_TO_BOUND"),
    ]
    assert all("ms old, maxAgeMs is" in message for _, _, message in refused)
    none = scan(cluster, "node1", {"maxAgeMs": 0})
    assert len(failures(none)) == 9 and none["records"] == []

    # An explicit position no replica has reached fails exactly that partition.
    beyond = scan(
        cluster, "node2", {"position": [{"topic": "trains", "partition": 4, "offset": str(10**9)}]}
    )
    assert [p["partition"] for p in beyond["meta"]["partitions"] if p["failure"]] == [4]

    # Tokens round-trip through any node and only move forward.
    for node in ("node2", "node1", "node3"):
        answer = scan(cluster, node, {"token": token})
        assert not failures(answer), node
        assert all(
            decode_token(answer["meta"]["consistencyToken"])[tp] >= o for tp, o in bound.items()
        )
        token = answer["meta"]["consistencyToken"]

    # A rolling token over an older position is still valid input.
    old = encode_token({("trains", 0): 1})
    assert not failures(scan(cluster, "node1", {"token": old}))
    store.start()


def test_a_damaged_snapshot_is_refused_and_the_previous_version_keeps_serving(
    remote, tmp_path: Path
) -> None:
    cluster, store = remote
    # node3 serves version 1, from the last test; stopped while its versions 2 are damaged,
    # so that its own periodic sync cannot fetch them whole in between
    status = cluster.nodes.status("node3")
    stale = [p for p in (2, 5, 8) if status["partitions"][str(p)]["version"] == 1]
    assert stale, "node3 should still hold version 1 of its active partitions"
    cluster.nodes.kill("node3")
    if store.proc is None:
        store.start()
    bucket = open_store(cluster.project.snapshot_url)
    found = bucket.read(FILE_NAME)
    assert found is not None
    manifest = orjson.loads(found[0])
    node3 = cluster.project.cluster.node("node3")
    damaged, flipped = stale[0], stale[1] if len(stale) > 1 else None
    local = Path(cluster.project.snapshot_store)  # the pipeline's copies, written as uploaded
    layer = top(manifest, damaged)["path"]
    damage = tmp_path / "damaged"
    damage.write_bytes((local / layer).read_bytes()[: (local / layer).stat().st_size // 2])
    bucket.upload(layer, damage)  # truncated
    if flipped is not None:
        raw = bytearray((local / top(manifest, flipped)["path"]).read_bytes())
        raw[len(raw) // 2] ^= 0xFF  # same size, one bit pattern changed
        damage.write_bytes(bytes(raw))
        bucket.upload(top(manifest, flipped)["path"], damage)
    cluster.nodes.start("node3")  # on the version 1 it holds: the damaged ones are refused

    response = httpx.post(
        f"{node3.url}/internal/sync",
        headers={SECRET_HEADER: cluster.project.cluster.secret},
        timeout=30,
    )
    assert response.status_code == 200
    result = response.json()
    assert "checksum mismatch" in result["errors"][str(damaged)]
    status = cluster.nodes.status("node3")
    assert status["partitions"][str(damaged)]["version"] == 1
    if flipped is not None:
        assert "checksum mismatch" in result["errors"][str(flipped)]
        assert status["partitions"][str(flipped)]["version"] == 1
    # No download leaves its hidden file behind (node3's own periodic sync may be retrying
    # the damaged versions right now, so wait for a moment between its attempts).
    snapshots = node3.data_dir / "snapshots"
    deadline = time.monotonic() + 10
    while any(p.name.startswith(".") for p in snapshots.rglob("*")):
        assert time.monotonic() < deadline, sorted(p.name for p in snapshots.rglob("*"))
        time.sleep(0.01)

    # The previous version keeps answering for the damaged partition.
    answer = scan(cluster, "node3", {"requireActive": True})
    part = next(p for p in answer["meta"]["partitions"] if p["partition"] == damaged)
    assert part["node"] == "node3" and part["version"] == 1 and part["failure"] is None

    # ... and the node says it is late, in its log and in /metrics, within a bounded time.
    published = top(manifest, damaged)["version"]
    said = f"partition {damaged} serves version 1 (position"
    deadline = time.monotonic() + LATE_WARN_S + 10
    log = cluster.nodes.processes.log_path("node3")
    assert log is not None
    while said not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, cluster.nodes.processes.tail("node3")
        time.sleep(0.2)
    lines = [x for x in log.read_text(errors="replace").splitlines() if said in x]
    assert any("WARNING" in x and f"published version {published} (position" in x for x in lines)
    late = metric(cluster.nodes.metrics("node3"), "stategate_snapshot_late_seconds",
                  partition=str(damaged))  # fmt: skip
    assert late > LATE_WARN_S


def own_store(served: Served, tmp_path: Path) -> tuple[Project, Path, dict[str, Any]]:
    """The served project on a copy of its snapshot store, that copy, and its manifest's
    partitions."""
    store = tmp_path / "store"
    shutil.copytree(served.project.snapshot_store, store)
    project = dataclasses.replace(served.project, snapshot_url=str(store))
    return project, store, orjson.loads((store / "manifest.json").read_bytes())["partitions"]


def synced(
    project: Project, catalog: SnapshotCatalog, steps: Callable[[SnapshotSync], Awaitable[None]]
) -> None:
    """Run `steps` on node1's snapshot sync into `catalog`, then close it."""

    async def main() -> None:
        peers = PeerClient(project.cluster.secret, pooled(project.settings))
        try:
            topology = TopologyView(Topology.static(project.cluster))
            core = NodeCore(project, "node1", topology, catalog, Switches(), peers)
            await steps(SnapshotSync(core))
        finally:
            await peers.aclose()

    try:
        asyncio.run(main())
    finally:
        catalog.close()


def test_a_damaged_version_waits_for_a_backoff_before_it_is_fetched_again(
    served: Served, tmp_path: Path
) -> None:
    """Each attempt is counted in the error: a sync within the backoff does not fetch the
    damaged file again, an explicit one does, and a repaired file is installed."""
    project, store, entries = own_store(served, tmp_path)
    hosted = project.cluster.hosted_by("node1")
    damaged = hosted[0]
    path = store / entries[str(damaged)]["layers"][-1]["path"]
    intact = path.read_bytes()
    path.write_bytes(intact[: len(intact) // 2])
    catalog = SnapshotCatalog(tmp_path / "node1", project, 1, "256MB")

    held = set(chains.held(project, hosted))

    async def steps(sync: SnapshotSync) -> None:
        assert set(await sync.run_once()) == held - {damaged}
        assert "checksum mismatch" in sync.errors[damaged]
        assert sync.errors[damaged].endswith("(attempt 1, next in 2 s)")
        assert await sync.run_once() == {}
        assert sync.errors[damaged].endswith("(attempt 1, next in 2 s)"), "not fetched"
        assert await sync.run_once(force=True) == {}
        assert sync.errors[damaged].endswith("(attempt 2, next in 4 s)")
        path.write_bytes(intact)
        version = entries[str(damaged)]["layers"][-1]["version"]
        assert await sync.run_once(force=True) == {damaged: version}
        assert damaged not in sync.errors

    synced(project, catalog, steps)


def test_a_partition_that_comes_back_reuses_its_layers_and_stale_ones_go(
    served: Served, tmp_path: Path
) -> None:
    """A node's folder as an earlier run left it (its replicas moved meanwhile): the layer of
    a partition it is given again is reused, not fetched (the store's copy is gone here);
    a partition it does not hold keeps the layer the manifest still names, and loses one
    the manifest no longer names."""
    project, store, entries = own_store(served, tmp_path)
    hosted = project.cluster.hosted_by("node1")
    back = hosted[0]
    other = next(p for p in range(project.cluster.partitions) if p not in hosted)
    folder = tmp_path / "node1"
    left = {}
    for partition in (back, other):
        (layer,) = entries[str(partition)]["layers"]
        left[partition] = folder / relative_path(partition, layer["version"], "base")
        left[partition].parent.mkdir(parents=True)
        shutil.copyfile(store / layer["path"], left[partition])
    stale = folder / relative_path(other, 99, "delta")
    stale.write_bytes(b"a layer of a chain the manifest moved past")
    (store / entries[str(back)]["layers"][0]["path"]).unlink()  # only the node's copy is left
    catalog = SnapshotCatalog(folder, project, 1, "256MB")

    async def steps(sync: SnapshotSync) -> None:
        assert set(await sync.run_once()) == set(chains.held(project, hosted))

    synced(project, catalog, steps)
    assert left[back].exists() and left[other].exists()
    assert not stale.exists()


def test_a_partition_handed_over_is_served_for_linger_s_unless_given_back(
    served: Served, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition the assignment takes from a node is still served LINGER_S (for peers
    whose view of the move lags) and then dropped with its files; one given back within
    LINGER_S is served on, its files never deleted (README: Warm-up before handover)."""
    monkeypatch.setattr(delivery_sync, "LINGER_S", 0.5)
    project, _, _ = own_store(served, tmp_path)
    gone, back = project.cluster.hosted_by("node1")[:2]
    catalog = SnapshotCatalog(tmp_path / "node1", project, 1, "256MB")

    def without(topology: Topology, partitions: set[int], later: int) -> Topology:
        """`topology` `later` versions on, with node1 serving none of `partitions`."""
        placement = tuple(
            tuple(n for n in nodes if n != "node1" or p not in partitions)
            for p, nodes in enumerate(topology.assignment.serving)
        )
        none = ((),) * len(placement)
        moved = dataclasses.replace(
            topology.assignment, version=topology.version + later, serving=placement,
            warming=none, target=placement,
        )  # fmt: skip
        return dataclasses.replace(topology, assignment=moved)

    async def steps(sync: SnapshotSync) -> None:
        await sync.run_once()
        before = sync.topology.current
        files = {p: list((catalog.folder / partition_folder(p)).iterdir()) for p in (gone, back)}
        sync.topology.update(without(before, {gone, back}, 1))
        for p in (gone, back):
            sync.hand_over(p)
        await sync.run_once()
        assert {gone, back} <= set(catalog.current()), "dropped before LINGER_S"
        sync.topology.update(without(before, {gone}, 2))  # `back` given back
        await asyncio.sleep(0.6)
        await sync.run_once()
        assert gone not in catalog.current() and back in catalog.current()
        assert not any(p.exists() for p in files[gone]), "its files stayed"
        assert all(p.exists() for p in files[back]), "a partition given back lost its files"

    synced(project, catalog, steps)


def test_a_node_starts_on_the_newest_file_that_opens(served: Served, tmp_path: Path) -> None:
    """A newer file that does not open (a crash mid-install) gives way to the older valid
    one, and is removed."""
    entries = orjson.loads((Path(served.project.snapshot_store) / "manifest.json").read_bytes())
    partition = served.project.cluster.hosted_by("node1")[0]
    (entry,) = entries["partitions"][str(partition)]["layers"]
    folder = tmp_path / "snapshots"
    folder.mkdir()
    older = folder / relative_path(partition, entry["version"], "base")
    older.parent.mkdir()
    shutil.copyfile(Path(served.project.snapshot_store) / entry["path"], older)
    broken = folder / relative_path(partition, entry["version"] + 1, "base")
    broken.write_bytes(b"not a duckdb file" * 100)
    catalog = SnapshotCatalog(folder, served.project, 1, "256MB")
    try:
        catalog.open_existing([partition])
        assert catalog.version(partition) == entry["version"]
        assert not broken.exists() and older.exists()
    finally:
        catalog.close()
