"""A replica behind what the pipeline published is named once, by partition, with the
version and position served and published, and its seconds late are read at every check
(gateway/storage/delivery/lateness.py)."""

from __future__ import annotations

import logging
import time

import pytest

from contracts.clock import now_ms
from contracts.manifest import Layer, Manifest, PartitionEntry
from gateway.storage.delivery.lateness import LATE_WARN_S, LatenessWatch, late


def chain(top: int, published_ms: int) -> PartitionEntry:
    """Versions 1..top, each published a second after the one below it, top at published_ms."""
    return PartitionEntry(
        tuple(
            Layer(v, "base" if v == 1 else "delta", f"p/v{v}", "ab", 1, {"t": 10 * v}, 0,
                  published_ms=published_ms - (top - v) * 1000)
            for v in range(1, top + 1)
        )
    )  # fmt: skip


def test_a_partition_is_late_from_when_its_first_missing_version_was_published() -> None:
    at = 1_000_000
    manifest = Manifest({0: chain(5, at - 2000), 1: chain(3, at - 100), 2: chain(2, at)})
    found = late(manifest, {0: 2, 1: 3, 2: 2, 7: 1}, at)
    assert set(found) == {0}, "current partitions and ones the manifest lacks are not late"
    (zero,) = found.values()
    assert (zero.serving, zero.published) == (2, 5)
    assert zero.serving_position == {"t": 20} and zero.published_position == {"t": 50}
    assert zero.seconds == pytest.approx(4.0)  # version 3 was published 2 s before version 5


def test_the_watch_warns_once_when_a_stall_starts_and_says_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    serving = {0: 1}
    manifest = Manifest({0: chain(2, now_ms() - int(LATE_WARN_S * 1000) - 1000)})
    watch = LatenessWatch(lambda: manifest, lambda: serving, time.monotonic)
    with caplog.at_level(logging.INFO, logger="gateway.storage.delivery.lateness"):
        watch.check()
        watch.check()
        assert watch.seconds()[0] > LATE_WARN_S
        serving[0] = 2
        watch.check()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("partition 0 serves version 1")
    assert "published version 2 (position {'t': 20})" in warnings[0]
    assert "partition 0 caught up" in caplog.records[-1].getMessage()
    assert watch.seconds() == {}


def test_a_sync_that_finishes_no_round_is_named(caplog: pytest.LogCaptureFixture) -> None:
    last = time.monotonic() - LATE_WARN_S - 1
    watch = LatenessWatch(Manifest, dict, lambda: last)
    with caplog.at_level(logging.WARNING, logger="gateway.storage.delivery.lateness"):
        watch.check()
        watch.check()
    (record,) = caplog.records
    assert "the snapshot sync has not finished a round" in record.getMessage()
