"""Chains of layers for tests: written round by round with the pipeline's writer (no Spark),
and read the plain way: every layer file opened on its own, checked against the manifest, and
merged in Python (the newest row of each key wins, a deleted table key is gone), independent
of the nodes' overlays and of the pipeline's SQL."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from contracts import chains, eventlog
from contracts.manifest import FILE_NAME, Layer
from contracts.project import Project, Store
from contracts.snapshot_file import key_columns
from gateway.storage.memory.row_select import columns
from snapshot_store import open_store
from spark_pipeline.snapshot import LayerTask, build_layer
from tests.oracle import retained
from tests.projects import produce_test_events

SNAPSHOT_FORMAT = 3


def fetched_from_bucket(project: Project, folder: Path) -> dict:
    """The manifest in the project's object store, with every layer it names downloaded
    into `folder` (where chain_state reads them): what the bucket alone holds."""
    assert project.object_store is not None
    store = open_store(project.object_store)
    found = store.read(FILE_NAME)
    assert found is not None, f"no manifest in {project.object_store}"
    manifest: dict = json.loads(found[0])
    for entry in manifest["partitions"].values():
        for layer in entry["layers"]:
            store.download(layer["path"], folder / layer["path"])
    return manifest


def chain_state(project: Project, store_dir: Path, entry: dict, chain: int) -> dict[str, list]:
    """store -> its rows (as the snapshot stores them, sorted by key), of each store the
    chain holds (contracts/chains.py); checks each layer's checksum, size, version, kind and
    the chain's top position on the way."""
    held = chains.stores(project, chain)
    state: dict[str, dict[tuple, tuple]] = {store.name: {} for store in held}
    layers = entry["layers"]
    assert layers[0]["kind"] == "base" and all(x["kind"] == "delta" for x in layers[1:])
    for number, layer in enumerate(layers):
        path = store_dir / layer["path"]
        assert layer["version"] == layers[0]["version"] + number
        assert layer["size"] == path.stat().st_size
        assert layer["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        header = (chain, layer["version"], layer["created_ms"], SNAPSHOT_FORMAT, layer["kind"])
        with opened(path) as con:
            assert con.execute("SELECT * FROM _snapshot").fetchall() == [header]
            positions = con.execute('SELECT topic, "offset" FROM _position').fetchall()
            assert dict(positions) == layer["position"]
            for store in held:
                _apply(con, store, layer["kind"], state[store.name])
    found = {name: [rows[k] for k in sorted(rows)] for name, rows in state.items()}
    for store in held:
        if store.kind == "versions":
            found[store.name] = retained(store, found[store.name])
    return found


@contextmanager
def opened(path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """A layer file as DuckDB tables: a base opened read-only; a delta read with pyarrow
    alone (each store's IPC stream in its row of the file, the header in the schema's
    metadata) into an in-memory database of the same tables."""
    if path.name.endswith(".duckdb"):
        with duckdb.connect(str(path), read_only=True) as con:
            yield con
        return
    outer = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    meta = {k.decode(): v.decode() for k, v in (outer.schema.metadata or {}).items()}
    stores, rows = outer.column("store").to_pylist(), outer.column("rows").to_pylist()
    with duckdb.connect() as con:
        con.execute(
            'CREATE TABLE _snapshot ("partition" INTEGER, version BIGINT, created_ms BIGINT, '
            "format INTEGER, kind VARCHAR)"
        )
        fields = ("partition", "version", "created_ms", "format")
        con.execute(
            "INSERT INTO _snapshot VALUES (?, ?, ?, ?, ?)",
            [*(int(meta[f]) for f in fields), meta["kind"]],
        )
        con.execute('CREATE TABLE _position (topic VARCHAR, "offset" BIGINT)')
        for topic, offset in json.loads(meta["positions"]).items():
            con.execute("INSERT INTO _position VALUES (?, ?)", [topic, offset])
        for name, stream in zip(stores, rows, strict=True):
            con.register("delta", pa.ipc.open_stream(stream).read_all())
            con.execute(f'CREATE TABLE "{name}" AS FROM delta')
            con.unregister("delta")
        yield con


def _apply(con: duckdb.DuckDBPyConnection, store: Store, kind: str, rows: dict) -> None:
    width = len(key_columns(store))
    deletes = store.kind == "table" and kind == "delta"
    select = ", ".join(columns(store)) + (", _deleted" if deletes else "")
    if kind == "base":
        rows.clear()
    for row in con.execute(f'SELECT {select} FROM "{store.name}" ORDER BY rowid').fetchall():
        identity = tuple(row[:width])
        if deletes and row[-1]:
            rows.pop(identity, None)
        else:
            rows[identity] = tuple(row[:-1]) if deletes else tuple(row)


class WrittenChain:
    """The pipeline's side without Spark: rounds of test events appended to the log, each
    written as one layer of a partition's chain (of its partitioned or of its global stores)
    by the pipeline's writer (spark_pipeline/snapshot.py)."""

    def __init__(self, project: Project, store_root: Path, chain: int) -> None:
        self.project, self.store_root, self.chain = project, store_root, chain
        self.partition = chains.partition(project, chain)
        self.layers: list[Layer] = []
        self.positions = {topic: 0 for topic in project.topics}

    def next_layer(self, seed: int, n_bookings: int = 300, n_trains: int = 100) -> Layer:
        produce_test_events(self.project, seed, n_bookings=n_bookings, n_trains=n_trains)
        read = {name: self._records(name) for name in self.project.topics}
        records = {name: table for name, table in read.items() if table is not None}
        for name, table in records.items():
            self.positions[name] += len(table)
        task = LayerTask(
            partition=self.chain,
            version=len(self.layers) + 1,
            kind="delta" if self.layers else "base",
            store_root=str(self.store_root),
            below=tuple(self.layers),
            positions=dict(self.positions),
            topics=tuple(self.project.topics.values()),
            stores=chains.stores(self.project, self.chain),
        )
        _, layer = build_layer(task, records)
        self.layers.append(layer)
        return layer

    def _records(self, topic: str) -> pa.Table | None:
        """The partition's records past the chain's position, as a pipeline task gets them
        (None: no segment holds any)."""
        start = self.positions[topic]
        paths = eventlog.segments_from(self.project.log_dir, topic, self.partition, start)
        if not paths:
            return None
        table = pa.concat_tables([pq.read_table(p) for p in paths])
        table = table.filter(pc.greater_equal(table.column("offset"), start))
        key = table.column("key").cast(pa.string())
        return pa.table(
            {
                "offset": table.column("offset"),
                "timestamp": table.column("timestamp"),
                "key": key,
                "value": table.column("value"),
            }
        )

    @property
    def entry(self) -> dict:
        """The chain as a manifest entry names it (for chain_state)."""
        return {"layers": [vars(layer) for layer in self.layers]}
