"""A node's catalog installing a chain delta by delta, each delta a level of its own and the
levels merged by `settle` (gateway/storage/catalog/layers.py): after every install and every settle,
every query kind over every store equals the oracle computed from the raw log at the chain's
position, from memory and by SQL. The layer files are the pipeline's own
(spark_pipeline/snapshot.py, without Spark)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts import chains
from contracts.manifest import Layer
from contracts.project import Project, Store, history_of, load
from contracts.snapshot_file import relative_path
from gateway.model.queries import Get, Range, Versions, Windows, WindowsOfKey
from gateway.storage import execution
from gateway.storage.catalog import hub
from gateway.storage.catalog.layers import MAX_LEVELS, LevelImage, LocalLayer
from gateway.storage.catalog.snapshots import Snapshot, SnapshotCatalog
from gateway.storage.memory import history, windows
from gateway.storage.sql import reads
from tests.chains import WrittenChain
from tests.oracle import Log
from tests.projects import write_project

PARTITIONS = 3
PARTITION = 1
CHAINS = {"partitioned": PARTITION, "global": PARTITIONS + PARTITION}  # contracts/chains.py
ROUNDS = 9  # the first makes the base; each other a delta of its own
EVERYTHING = (-(2**62), 2**62)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return load(write_project(tmp_path, [1, 2, 3], partitions=PARTITIONS))


@pytest.fixture(params=sorted(CHAINS))
def chain_id(request: pytest.FixtureRequest) -> int:
    """The partition's chain of its partitioned stores, or of its global ones."""
    return CHAINS[request.param]


@pytest.fixture
def catalog(project: Project, tmp_path: Path) -> Iterator[SnapshotCatalog]:
    catalog = SnapshotCatalog(tmp_path / "node", project, 1, "256MB")
    yield catalog
    catalog.close()


def test_a_chain_installed_delta_by_delta_answers_as_the_log_says(
    project: Project, catalog: SnapshotCatalog, tmp_path: Path, chain_id: int
) -> None:
    chain, oracle = WrittenChain(project, tmp_path / "store", chain_id), Log(project)
    local: list[LocalLayer] = []
    merges = after = 0
    for seed in range(ROUNDS):
        layer = chain.next_layer(seed)
        path = catalog.folder / relative_path(chain_id, layer.version, layer.kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(chain.store_root / layer.path, path)
        local.append(LocalLayer(layer.version, layer.kind, path))
        installed = catalog.install(chain_id, list(local))
        assert installed is not None
        levels = len(installed.overlay.levels) if installed.overlay else 0
        assert levels == (after + 1 if layer.kind == "delta" else 0)  # the delta alone was read
        check(project, catalog, installed, oracle, chain.positions, paged=True)
        catalog.settle()
        settled = catalog.get(chain_id)
        assert settled is not None and settled.version == layer.version
        after = len(settled.overlay.levels) if settled.overlay else 0
        assert after <= MAX_LEVELS
        merges += after < levels
        if settled is not installed:  # else checked above, in pages too
            check(project, catalog, settled, oracle, chain.positions)
        attached = catalog.cursor().execute("SELECT count(*) FROM duckdb_databases()").fetchall()
        assert attached[0][0] <= 1 + 1 + after + 2, "a released level is still attached"
    assert merges >= 2  # the rounds made levels merge, more than once


def check(
    project: Project,
    catalog: SnapshotCatalog,
    snapshot: Snapshot,
    oracle: Log,
    positions: dict[str, int],
    paged: bool = False,
) -> None:
    """Every store read whole, key by key and (`paged`) in pages equals the oracle."""
    assert snapshot.offsets == positions
    for store in chains.stores(project, snapshot.partition):
        expected = sorted(oracle.rows(store.name, PARTITION, positions[store.topic.name]).values())
        assert expected, store.name
        if store.kind == "versions":  # every version a query may read, key by key
            declared = project.stores[store.name.removesuffix("_history")]
            horizon = snapshot.horizon(declared)
            assert horizon == max(row[1] for row in expected) - declared.history_ms
            keys = sorted({row[0] for row in expected})
            every = [Versions(key, horizon, 2**62, 10**6) for key in keys]
            runs = snapshot.runs(history_of(declared).name)
            assert runs is not None, "answered from memory"
            got = [row for asked in every for row in history.versions(runs, asked)]
            same(got, [[r[0], r[1], r[2], *r[4:]] for r in expected if not r[3]])
            cursor = catalog.cursor()
            read = [reads.versions(cursor, snapshot, declared, a) for a in every]
            by_sql = [row for rows in read for row in rows]
            same(by_sql, got)
            continue
        if store.kind == "window":
            whole = run(catalog, snapshot, store, Windows(*EVERYTHING, None, None))
            same(whole, expected)
            check_windows_of_keys(catalog, snapshot, store, expected)
            if not paged:
                continue
            rows = pages(
                catalog,
                snapshot,
                store,
                lambda after: Windows(*EVERYTHING, 31, after and (after[0], after[1])),
            )
            same(rows, expected)
            continue
        same(run(catalog, snapshot, store, Range(None, None, None, None)), expected)
        if paged:
            rows = pages(
                catalog, snapshot, store, lambda after: Range(None, None, 29, after and after[0])
            )
            same(rows, expected)
        keys = [row[0] for row in expected]
        missing = ["no such key"] if store.key_type == "string" else [10**9]
        table = snapshot.tables[store.name]
        if paged:
            found: list = []
            while page := table.scan(Range(None, None, 29, found[-1][0] if found else None)):
                found += page
            same(found, expected)
        same(sorted(table.get([*keys, *missing]), key=lambda r: r[0]), expected)
        for row in expected[::23]:
            same(table.get([row[0]]), [row])
            same(run(catalog, snapshot, store, Get((row[0],))), [row])


def check_windows_of_keys(
    catalog: SnapshotCatalog, snapshot: Snapshot, store: Store, expected: list
) -> None:
    """Each key's windows in its middle third, from memory (storage/memory/windows.py) and by
    SQL."""
    runs = snapshot.runs(store.name)
    assert runs is not None, "answered from memory"
    for key in sorted({row[0] for row in expected}):
        mine = [row for row in expected if row[0] == key]
        low, high = mine[len(mine) // 3][1], mine[2 * len(mine) // 3][1]
        asked = WindowsOfKey(key, low, high)
        got = windows.of_key(runs, asked)
        same(got, [row for row in mine if low <= row[1] <= high])
        same(run(catalog, snapshot, store, asked), got)
        assert windows.of_key(runs, WindowsOfKey(key, high + 1, high)) == []


def run(catalog: SnapshotCatalog, snapshot: Snapshot, store: Store, query: object) -> list:
    return execution.by_sql(catalog.cursor(), snapshot, store, query)  # type: ignore[arg-type,return-value]


def pages(catalog: SnapshotCatalog, snapshot: Snapshot, store: Store, query: object) -> list:
    """Every row, page by page, each page after the last one's last row."""
    found: list = []
    after = None
    while True:
        page = run(catalog, snapshot, store, query(after))  # type: ignore[operator]
        found += page
        if not page:
            return found
        after = tuple(page[-1][:2])


def same(got: list, expected: list) -> None:
    assert len(got) == len(expected), (len(got), len(expected))
    for g, e in zip(got, expected, strict=True):
        assert tuple(g) == tuple(e) or tuple(g) == pytest.approx(tuple(e)), (g, e)


def test_a_partition_handed_over_while_its_delta_is_read_stays_handed_over(
    project: Project,
    catalog: SnapshotCatalog,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    chain_id: int,
) -> None:
    """The node hands a partition over (its topology listener, on the event loop) while a
    sync thread reads the partition's next delta over the snapshot it served: the install
    must not serve a snapshot over the base the handover detached; given back, the
    partition answers as the log says."""
    chain, oracle = WrittenChain(project, tmp_path / "store", chain_id), Log(project)
    layers = [chain.next_layer(seed) for seed in range(2)]
    assert catalog.install(chain_id, [copied_in(catalog, chain, layers[0])]) is not None
    extend = catalog._extend

    def handed_over_meanwhile(partition: int, current: Snapshot, local: list) -> Snapshot:
        catalog.drop(partition)
        return extend(partition, current, local)

    monkeypatch.setattr(catalog, "_extend", handed_over_meanwhile)
    delta = copied_in(catalog, chain, layers[1])
    assert catalog.install(chain_id, [copied_in(catalog, chain, layers[0]), delta]) is None
    assert catalog.get(chain_id) is None
    monkeypatch.undo()
    given_back = catalog.install(chain_id, [copied_in(catalog, chain, layer) for layer in layers])
    assert given_back is not None
    check(project, catalog, given_back, oracle, chain.positions)


def copied_in(catalog: SnapshotCatalog, chain: WrittenChain, layer: Layer) -> LocalLayer:
    """A layer the pipeline wrote, downloaded to the node's folder (again, if deleted)."""
    path = catalog.folder / relative_path(chain.chain, layer.version, layer.kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(chain.store_root / layer.path, path)
    return LocalLayer(layer.version, layer.kind, path)


def test_a_follower_serves_the_keepers_levels_from_their_images(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chain_id: int
) -> None:
    """A node's keeper writes each level it makes (a delta read, or levels merged) once, as
    an image; its follower maps the keeper's levels, reading no delta itself, and answers as
    the log says after every install and every settle, also from a level whose image the
    keeper deleted once it let go of it. A level whose image is gone already is read from
    its deltas."""
    monkeypatch.setattr(hub, "LEVEL_DELETE_DELAY_S", 0.0)
    folder = tmp_path / "node"
    keeper = SnapshotCatalog(folder, project, 1, "256MB", images=True)
    follower = SnapshotCatalog(folder, project, 1, "256MB", owns_files=False, images=True)
    reads: list[object] = []
    read = follower._hub.read
    monkeypatch.setattr(follower._hub, "read", lambda *args: reads.append(args) or read(*args))
    chain, oracle = WrittenChain(project, tmp_path / "store", chain_id), Log(project)
    local: list[LocalLayer] = []
    try:
        for seed in range(ROUNDS):
            local.append(copied_in(keeper, chain, chain.next_layer(seed)))
            assert keeper.install(chain_id, list(local)) is not None
            for settle in (False, True):
                if settle:
                    keeper.settle()
                levels = told(keeper, chain_id)
                assert sum(level.span for level in levels) == seed
                before = follower.get(chain_id)
                mirrored = follower.install(chain_id, list(local), levels)
                assert mirrored is not None and mirrored.level_images() == levels
                if mirrored is not before:  # else checked as it was installed
                    check(project, follower, mirrored, oracle, chain.positions)
                if before is not None and before is not mirrored:
                    assert before.retired
                on_disk = {p for p in folder.rglob("*.level")}
                assert on_disk == {level.path for level in levels}, (
                    "a level let go of keeps its image"
                )
        assert reads == []
        local.append(copied_in(keeper, chain, chain.next_layer(ROUNDS)))
        assert keeper.install(chain_id, list(local)) is not None
        levels = told(keeper, chain_id)
        levels[-1].path.unlink()
        read_again = follower.install(chain_id, list(local), levels)
        assert read_again is not None and len(reads) == 1
        check(project, follower, read_again, oracle, chain.positions)
        with follower.lease(chain_id) as leased:
            assert leased is not None
            keeper.close()  # a stopping keeper deletes the images of its levels
            assert not [p for p in folder.rglob("*.level")]
            check(project, follower, leased, oracle, chain.positions)
    finally:
        follower.close()
        keeper.close()


def told(keeper: SnapshotCatalog, chain_id: int) -> tuple[LevelImage, ...]:
    """The levels of the chain the keeper serves, as it tells its followers."""
    served = keeper.get(chain_id)
    assert served is not None
    levels = served.level_images()
    assert levels is not None
    return levels
