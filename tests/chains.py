"""Reading a published chain of layers the plain way, for tests: every layer file opened on
its own, checked against the manifest, and merged in Python (the newest row of each key wins,
a deleted table key is gone). Independent of the nodes' overlays and of the pipeline's SQL."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb

from contracts.project import Project, Store
from gateway.storage.row_select import columns

SNAPSHOT_FORMAT = 2


def chain_state(project: Project, store_dir: Path, entry: dict, partition: int) -> dict[str, list]:
    """store -> its rows (as the snapshot stores them, sorted by key); checks each layer's
    checksum, size, version, kind and the chain's top position on the way."""
    state: dict[str, dict[tuple, tuple]] = {name: {} for name in project.stores}
    layers = entry["layers"]
    assert layers[0]["kind"] == "base" and all(x["kind"] == "delta" for x in layers[1:])
    for number, layer in enumerate(layers):
        path = store_dir / layer["path"]
        assert layer["version"] == layers[0]["version"] + number
        assert layer["size"] == path.stat().st_size
        assert layer["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        with duckdb.connect(str(path), read_only=True) as con:
            assert con.execute("SELECT * FROM _snapshot").fetchall() == [
                (partition, layer["version"], layer["created_ms"], SNAPSHOT_FORMAT, layer["kind"])
            ]
            positions = con.execute('SELECT topic, "offset" FROM _position').fetchall()
            assert dict(positions) == layer["position"]
            for name, store in project.stores.items():
                _apply(con, store, layer["kind"], state[name])
    return {name: [rows[k] for k in sorted(rows)] for name, rows in state.items()}


def _apply(con: duckdb.DuckDBPyConnection, store: Store, kind: str, rows: dict) -> None:
    width = 2 if store.kind == "window" else 1
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
