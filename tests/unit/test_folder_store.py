"""The folder store (snapshot_store/folder.py) answers as the S3 store does: a replace names
the manifest it read, and one that read an older one, or none while one exists, loses."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshot_store import Conflict, open_store
from snapshot_store.store import Missing


def test_a_replace_of_what_was_read_wins_and_a_stale_one_loses(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    assert store.read("manifest.json") is None
    first = store.replace("manifest.json", b"one", None)
    with pytest.raises(Conflict):
        store.replace("manifest.json", b"two", None)  # created meanwhile
    second = store.replace("manifest.json", b"two", first)
    with pytest.raises(Conflict):
        store.replace("manifest.json", b"three", first)  # replaced meanwhile
    assert store.read("manifest.json") == (b"two", second)


def test_objects_are_listed_by_prefix_downloaded_and_deleted(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    layer = tmp_path / "layer"
    layer.write_bytes(b"x" * 10)
    store.upload("p001/v000001.base.duckdb", layer)
    assert [(o.name, o.size) for o in store.listing("p001/")] == [("p001/v000001.base.duckdb", 10)]
    assert store.listing("p002/") == []
    store.download("p001/v000001.base.duckdb", tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == b"x" * 10
    store.delete("p001/v000001.base.duckdb")
    with pytest.raises(Missing):
        store.download("p001/v000001.base.duckdb", tmp_path / "again")
