"""A lookup table finds exactly the keys it holds, however a batch's keys are written: ASCII
keys numpy encodes at once, and those it would misread (cut to the index's width, a trailing
NUL dropped, not ASCII, not a string) taken one by one (gateway/storage/memory/lookup_table.py)."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from gateway.storage.memory.lookup_table import LookupTable

KEYS = ["", "a", "ab", "abc", "abcde", "b", "bcde", "Köln", "zz"]  # the index is 5 bytes wide
# each a key the index does not hold, which a careless encoding would turn into one it does
MISREAD = ["abcdex", "abcdeab", "bcdex", "ab\x00", "a\x00", "\x00", "Koln", "K\u00f6ln\x00"]
FOREIGN = [7, 2**70, 1.5, None, b"ab", "\ud800"]


def table() -> LookupTable:
    rows = pa.table({"key": KEYS, "n": list(range(len(KEYS)))})
    found = LookupTable.from_arrow(rows, integer_keys=False)
    assert found is not None
    return found


def found(rows: list[Any]) -> set[str]:
    return {row[0] for row in rows}


@pytest.mark.parametrize("probe", MISREAD + FOREIGN)
def test_a_key_the_index_would_misread_is_not_found(probe: Any) -> None:
    assert found(table().get(["abc", "bcde", probe])) == {"abc", "bcde"}


def test_batches_of_held_and_missing_keys_find_exactly_the_held_ones() -> None:
    rng = random.Random(52)
    candidates = [*KEYS, *MISREAD, *FOREIGN, "c", "abcd", "zzzzz"]
    for _ in range(300):
        keys = rng.choices(candidates, k=rng.choice([2, 3, 8, 40]))
        assert found(table().get(keys)) == {k for k in keys if k in KEYS}, keys


def test_a_batch_of_one_key_many_times_finds_its_row_once() -> None:
    assert table().get(["ab"] * 50) == [["ab", 2]]
