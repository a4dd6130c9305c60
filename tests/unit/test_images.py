"""A base's tables written to an image and mapped back (gateway/storage/catalog/images.py) answer as
the tables they were written from, over the file's pages (no copy), and outlive the file's
name; what is not an image is an ImageError."""

from __future__ import annotations

import pickle
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from gateway.storage.catalog import images
from gateway.storage.memory.key_runs import KeyRuns
from gateway.storage.memory.lookup_table import LookupTable

ROWS = 5000


def table() -> LookupTable:
    keys = [f"k{(i * 7919) % ROWS:05d}" for i in range(ROWS)]  # not in key order
    rows = pa.table({
        "key": keys,
        "price": [None if i % 11 == 0 else i * 0.5 for i in range(ROWS)],
        "trip": [f"trip {i % 5}" for i in range(ROWS)],  # few distinct: coded
        "note": [f"note {i}" for i in range(ROWS)],  # many: Arrow
        "seats": pa.array([i % 4 for i in range(ROWS)], pa.int64()),
    })  # fmt: skip
    found = LookupTable.from_arrow(rows, integer_keys=False, index=("price",))
    assert found is not None
    return found


def runs() -> KeyRuns:
    rows = pa.table({
        "key": pa.array([i // 10 for i in range(ROWS)], pa.int64()),
        "window_start": pa.array([(i % 10) * 3_600_000 for i in range(ROWS)], pa.int64()),
        "count": pa.array(list(range(ROWS)), pa.int64()),
    })  # fmt: skip
    found = KeyRuns.from_arrow(rows, integer_keys=True)
    assert found is not None
    return found


def test_tables_read_back_from_their_image_over_its_pages(tmp_path: Path) -> None:
    path = tmp_path / ".v000001.base.duckdb.image"
    written = ({"latest": table()}, {"latest": ROWS}, {}, {"windows": runs()})
    images.save(written, path)
    tables, rows, newest, indexed = images.load(path)
    path.unlink()  # the map outlives the name, as a worker's does the keeper's deletion
    assert rows == {"latest": ROWS} and newest == {}
    mapped, original = tables["latest"], written[0]["latest"]
    keys = ["k00000", "k04999", "k02500", "nobody", "k00011"]
    assert mapped.get(keys) == original.get(keys)
    assert mapped.all_rows() == original.all_rows()
    assert mapped.sorted_by.keys() == original.sorted_by.keys()
    for name, order in original.sorted_by.items():
        assert np.array_equal(mapped.sorted_by[name], order)
        assert not mapped.sorted_by[name].flags.owndata  # a view of the map, not a copy
    assert indexed["windows"].between(7, 0, 5 * 3_600_000) == runs().between(7, 0, 5 * 3_600_000)
    assert indexed["windows"].versions(499, 0, 10**9) == runs().versions(499, 0, 10**9)


@pytest.mark.parametrize("content", [b"", b"not an image at all", images.MAGIC + b"\x01"])
def test_what_is_not_an_image_is_an_image_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.image"
    path.write_bytes(content)
    with pytest.raises(images.ImageError):
        images.load(path)


def test_an_image_is_whole_or_absent(tmp_path: Path) -> None:
    path = tmp_path / "unpicklable.image"
    with pytest.raises((AttributeError, pickle.PicklingError)):
        images.save(lambda: None, path)  # fails while pickling: nothing left behind
    assert list(tmp_path.iterdir()) == []


def test_an_image_another_release_wrote_is_an_image_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade leaves the previous release's images in the node's folder: refused, so
    the base is read again (a node of an older release crashed at start on one whose
    classes had moved)."""
    path = tmp_path / "older.image"
    images.save({"rows": 3}, path)
    monkeypatch.setattr(images, "stamp", lambda: b"another!")
    with pytest.raises(images.ImageError, match="another release"):
        images.load(path)


def test_an_image_whose_classes_are_gone_is_an_image_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("stategate_test_moved")
    exec("class Table:\n    pass\n", module.__dict__)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    path = tmp_path / "moved.image"
    images.save(module.Table(), path)
    monkeypatch.delitem(sys.modules, module.__name__)  # the class moved: not found
    with pytest.raises(images.ImageError, match="stategate_test_moved"):
        images.load(path)
