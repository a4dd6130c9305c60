"""A compiled plan binds variables exactly as graphql-core's get_variable_values does: the
same coerced values, or errors (then the general path words them)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import graphql
import pytest
from graphql.execution.values import get_variable_values

from contracts.project import load
from resolvers.execution.plans import compile_plan
from resolvers.schema.build import build_schema
from tests.projects import write_project

DOCUMENT = """query Q($k: String!, $ks: [String!]!, $first: Int, $ids: [Int], $maybe: [String],
  $after: String, $flag: Boolean!, $n: Int!) {
  a: latestBooking(key: $k) { key }
  b: latestBookingBatch(keys: $ks) { entries { key } }
  c: latestBookingRange(first: $n, after: $after) { records { key } }
}"""
VALUES: list[Any] = ["a", "", "é🚆", 0, 1, -1, 2**31, -(2**31), 2**40, True, False, None, 1.5,
                     ["a", "b"], [], ["a", None], [1, 2], [None], [True], {"x": 1}]  # fmt: skip
# Each variable drawn from values its type takes most of the time, so that both bound and
# refused sets occur.


GOOD: dict[str, list[Any]] = {
    "k": ["a", "é🚆"], "ks": [["a", "b"], []], "first": [1, None], "ids": [[1, 2], None, [None]],
    "maybe": [["a", None], None], "after": ["x", None], "flag": [True, False], "n": [0, 5],
}  # fmt: skip


def _value(rng: random.Random, name: str) -> Any:
    return rng.choice(GOOD[name]) if rng.random() < 0.9 else rng.choice(VALUES)


@pytest.mark.parametrize("seed", range(3))
def test_plans_bind_variables_like_graphql_core(tmp_path: Path, seed: int) -> None:
    project = load(write_project(tmp_path, [1, 2, 3]))
    schema = build_schema(project)
    plan = compile_plan(schema, graphql.parse(DOCUMENT), None)
    assert plan is not None and plan.plain is not None
    rng = random.Random(seed)
    names = ["k", "ks", "first", "ids", "maybe", "after", "flag", "n"]
    refused = bound = 0
    for _ in range(400):
        given = {n: _value(rng, n) for n in names if rng.random() < 0.9}
        ours = plan.bind(schema._schema, given)
        theirs = get_variable_values(schema._schema, plan.variables, given)
        if isinstance(theirs, list):
            assert isinstance(ours, list), given
            refused += 1
            continue
        bound += 1
        assert not isinstance(ours, list), given
        assert ours.coerced == theirs.coerced, given
        assert {k: v.value for k, v in ours.sources.items()} == {
            k: v.value for k, v in theirs.sources.items()
        }, given
    assert refused > 20 and bound > 20
