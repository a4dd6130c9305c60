"""A member's record in the coordinator (contracts/coordination.py): the partitions whose data
it holds, which the leader places by, read back as written, and from a record written before
records said it."""

from __future__ import annotations

import json

import pytest

from contracts.coordination import CoordinatorError, Member


def test_a_record_says_what_its_member_holds() -> None:
    member = Member("node2", "10.0.0.12:8000", frozenset({4, 0, 7}))
    assert json.loads(member.to_json())["holds"] == [0, 4, 7]
    assert Member.from_json(member.to_json()) == member
    assert member.holding == {(0, "node2"), (4, "node2"), (7, "node2")}


def test_a_record_written_before_holds_existed_holds_nothing() -> None:
    raw = json.dumps({"format": 1, "id": "node1", "address": "127.0.0.1:1"}).encode()
    assert Member.from_json(raw) == Member("node1", "127.0.0.1:1")


@pytest.mark.parametrize("holds", ["0", [-1], [True], [1.5], [None], {"0": 1}])
def test_a_record_whose_holds_is_not_partitions_is_refused(holds: object) -> None:
    raw = json.dumps({"format": 1, "id": "n", "address": "a:1", "holds": holds}).encode()
    with pytest.raises(CoordinatorError, match="not one"):
        Member.from_json(raw)
