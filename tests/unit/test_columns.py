"""Every column form reads back exactly the values Arrow holds (type, nulls, order)."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from gateway.storage.memory.columns import ArrowColumn, CodedColumn, NumberColumn, column_of


def sample(kind: str, rng: random.Random, n: int) -> list[Any]:
    def one() -> Any:
        if rng.random() < 0.2:
            return None
        if kind == "int64":
            return rng.choice([0, -1, 2**62, -(2**63), rng.randrange(-(2**40), 2**40)])
        if kind == "int32":
            return rng.randrange(-(2**31), 2**31)
        if kind == "double":
            return rng.choice([0.5, -0.0, 1e300, math.inf, rng.uniform(-1e6, 1e6)])
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "few strings":
            return rng.choice(["BER-MUC", "", "é日🚆", "x"])
        return "".join(rng.choices("ab日🚆", k=rng.randrange(0, 6))) + str(rng.random())

    return [one() for _ in range(n)]


TYPES = {"int64": pa.int64(), "int32": pa.int32(), "double": pa.float64(), "bool": pa.bool_(),
         "few strings": pa.string(), "strings": pa.string()}  # fmt: skip
FORMS = {"int64": NumberColumn, "int32": NumberColumn, "double": NumberColumn,
         "bool": NumberColumn, "few strings": CodedColumn, "strings": ArrowColumn}  # fmt: skip


@pytest.mark.parametrize("kind", list(TYPES))
def test_a_column_reads_back_what_arrow_holds(kind: str) -> None:
    rng = random.Random(kind)
    values = sample(kind, rng, 400)
    array = pa.chunked_array([values[:150], values[150:]], type=TYPES[kind])
    column = column_of(array)
    assert isinstance(column, FORMS[kind])
    expected = array.to_pylist()
    for row in range(len(values)):
        got = column.value(row)
        assert got == expected[row] and type(got) is type(expected[row]), row
    for _ in range(50):
        rows = np.array(
            [rng.randrange(len(values)) for _ in range(rng.randrange(0, 30))], dtype=np.int64
        )
        got_many = column.values(rows)
        want = [expected[r] for r in rows.tolist()]
        assert got_many == want
        assert [type(v) for v in got_many] == [type(v) for v in want]
