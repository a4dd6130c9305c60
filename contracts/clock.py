"""The one wall clock every timestamp of ours is read from: milliseconds since the epoch, as
Kafka stamps records and as manifests, snapshots and statuses are stamped."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
EARLIEST_MS, LATEST_MS = -(2**62), 2**62  # before and after any timestamp a record may hold
UNITS_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def instant(ms: int) -> str:
    """A time as the API writes it (RFC 3339, UTC), else in ms past the datetime range."""
    try:
        moment = EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms"
    return moment.isoformat(timespec="milliseconds" if ms % 1000 else "seconds")


def duration(ms: int) -> str:
    """A span as a project file spells it, in its largest whole unit: 7d, 90m."""
    unit = next(u for u, size in UNITS_MS.items() if ms % size == 0)
    return f"{ms // UNITS_MS[unit]}{unit}"


def left(done: int, total: int, elapsed_s: float) -> str:
    """What a progress line adds: "about 40 s left", at the pace so far ("" before any)."""
    if done <= 0 or done >= total:
        return ""
    return f", about {elapsed_s * (total - done) / done:.0f} s left"
