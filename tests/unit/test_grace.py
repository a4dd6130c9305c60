"""A lost member's grace (gateway/cluster/coordinator.py): its replicas stay while the grace
lasts, counted from when the leader first saw it gone, and from nothing older."""

from __future__ import annotations

import logging

import pytest

from gateway.cluster.coordinator import Grace

SECONDS = 3.0


def test_a_lost_member_is_kept_for_its_grace_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    grace = Grace(SECONDS)
    with caplog.at_level(logging.WARNING):
        assert grace.kept({"node3"}, now=100.0) == {"node3"}
        assert grace.kept({"node3"}, now=102.9) == {"node3"}
        assert grace.kept({"node3"}, now=103.0) == set()
    assert [r.getMessage() for r in caplog.records] == [
        "node3 is not registered: its replicas stay for 3.0 s"
    ]


def test_a_member_that_came_back_gets_a_whole_grace_when_lost_again() -> None:
    grace = Grace(SECONDS)
    assert grace.kept({"node3"}, now=100.0) == {"node3"}
    assert grace.kept(set(), now=101.0) == set()  # registered again
    assert grace.kept({"node3"}, now=110.0) == {"node3"}
    assert grace.kept({"node3"}, now=112.9) == {"node3"}


def test_a_leader_counts_from_its_own_sight_not_from_an_earlier_term() -> None:
    """Seen gone while leading, then another node led (and saw it come back and go again):
    leading again, this node gives it a whole grace, not the rest of the old one."""
    grace = Grace(SECONDS)
    assert grace.kept({"node3"}, now=100.0) == {"node3"}
    grace.forget()  # read a state led by another node
    assert grace.kept({"node3"}, now=120.0) == {"node3"}
    assert grace.kept({"node3"}, now=122.9) == {"node3"}
    assert grace.kept({"node3"}, now=123.0) == set()


def test_each_member_has_a_grace_of_its_own() -> None:
    grace = Grace(SECONDS)
    assert grace.kept({"node2"}, now=100.0) == {"node2"}
    assert grace.kept({"node2", "node3"}, now=102.0) == {"node2", "node3"}
    assert grace.kept({"node2", "node3"}, now=103.5) == {"node3"}
    assert grace.kept({"node2", "node3"}, now=105.0) == set()
