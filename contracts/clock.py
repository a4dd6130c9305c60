"""The one wall clock every timestamp of ours is read from: milliseconds since the epoch, as
Kafka stamps records and as manifests, snapshots and statuses are stamped."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
