"""A writer killed while writing a layer leaves its temporary file (and DuckDB's WAL beside
it); prune removes such leftovers once they are past the grace period, and never a file a
writer may still be writing."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from contracts.manifest import Manifest
from spark_pipeline.publish import TEMPORARY_GRACE_S, prune, sweep_temporaries

OLD = time.time() - TEMPORARY_GRACE_S - 60


def leftover(
    store: Path, partition: int, layer: str, age: float | None, wal: bool = True
) -> list[Path]:
    folder = store / f"p{partition:03d}"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{layer}.{uuid.uuid4().hex}.tmp"
    made = [tmp, Path(f"{tmp}.wal")] if wal else [tmp]
    for path in made:
        path.write_bytes(b"x" * 100)
        if age is not None:
            os.utime(path, (age, age))
    return made


def layout(store: Path) -> dict[str, list[Path]]:
    kept_wal_fresh = leftover(store, 0, "v000004.base.duckdb", OLD)
    os.utime(kept_wal_fresh[1])  # the WAL still grows: a writer is at work
    other = store / "p000" / "notes.txt"
    other.write_text("not ours")
    os.utime(other, (OLD, OLD))
    return {
        "gone": [
            *leftover(store, 0, "v000003.delta.arrow", OLD, wal=False),
            *leftover(store, 1, "v000001.base.duckdb", OLD, wal=False),
            *leftover(store, 7, "v000002.base.duckdb", OLD),  # a partition never published
        ],
        "kept": [
            *leftover(store, 2, "v000009.delta.arrow", None, wal=False),
            *kept_wal_fresh,
            other,
        ],
    }


def test_prune_removes_old_temporary_layer_files_and_keeps_fresh_ones(tmp_path: Path) -> None:
    files = layout(tmp_path)
    prune(tmp_path, Manifest({}, {}, "digest", 0))
    assert [p for p in files["gone"] if p.exists()] == []
    assert [p for p in files["kept"] if not p.exists()] == []


def test_the_sweep_names_what_it_removed(tmp_path: Path) -> None:
    files = layout(tmp_path)
    assert sorted(sweep_temporaries(tmp_path)) == sorted(files["gone"])
    assert sweep_temporaries(tmp_path) == []
