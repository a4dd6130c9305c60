"""The pipeline's progress lines (spark_pipeline/progress.py), captured and read back."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

# partition 3: bookings [0, 242) 242 records, trains [0, 73) 73 records
PLANNED = re.compile(r"^partition (\d+): (\w+ \[\d+, \d+\) \d+ records(?:, .*)?)$")
RANGE = re.compile(r"(\w+) \[(\d+), (\d+)\) (\d+) records")
# partition 3: wrote v1 base, 315 records, 2.4 MB in 2.0 s; rows latestBooking:210 ...;
# positions bookings-3:242 trains-3:73
WROTE = re.compile(
    r"^partition (\d+): wrote v(\d+) (base|delta), (\d+) records, .* in [\d.]+ s; "
    r"rows (.*); positions (.*)$"
)
# micro-batch 4: 180 records, partitions [0, 3] changed in 0.420 s (driver); positions ...
MICRO_BATCH = re.compile(
    r"^micro-batch (\d+): (\d+) records, partitions \[([\d, ]*)\] changed in [\d.]+ s "
    r"\((driver|executors)\); positions (.*) \(total \d+ records, \d+ layers\)$"
)


class Lines(logging.Handler):
    """Every message logged under a logger, formatted."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def captured(name: str = "spark_pipeline") -> Iterator[list[str]]:
    """The INFO messages logged under `name` while the block runs (any thread)."""
    logger = logging.getLogger(name)
    handler, level = Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def positions(text: str) -> dict[int, dict[str, int]]:
    """'bookings-0:12 trains-0:3' -> {0: {"bookings": 12, "trains": 3}}."""
    found: dict[int, dict[str, int]] = {}
    for item in text.split() if text != "-" else ():
        name, offset = item.rsplit(":", 1)
        topic, partition = name.rsplit("-", 1)
        found.setdefault(int(partition), {})[topic] = int(offset)
    return found


def planned(messages: list[str]) -> dict[int, dict[str, tuple[int, int, int]]]:
    """partition -> topic -> (start, end, records) of a run's plan lines."""
    plan: dict[int, dict[str, tuple[int, int, int]]] = {}
    for message in messages:
        match = PLANNED.match(message)
        if match:
            ranges = RANGE.findall(match.group(2))
            plan[int(match.group(1))] = {t: (int(s), int(e), int(n)) for t, s, e, n in ranges}
    return plan


def written(
    messages: list[str],
) -> dict[int, tuple[int, str, int, dict[str, int], dict[str, int]]]:
    """partition -> (version, kind, records, rows per store, positions) of a run's layer
    lines."""
    layers = {}
    for message in messages:
        match = WROTE.match(message)
        if match:
            p, version, kind, records, rows, at = match.groups()
            per_store = {s: int(n) for s, n in (item.split(":") for item in rows.split())}
            layers[int(p)] = (int(version), kind, int(records), per_store, positions(at)[int(p)])
    return layers
