"""A producer for tests whose cluster is read while it changes: bookings appended in the
background, and one booking of each watched key whose push a subscription must see."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator

from contracts.eventlog import Record
from contracts.project import Project
from tests.projects import HOUR_MS, START_MS
from topics import open_log

WATCHED = ("C000014", "C000021", "C000042")  # one subscription each
PRODUCE_EVERY_S = 0.05


@contextlib.contextmanager
def producing(project: Project) -> Iterator[None]:
    """Bookings of the test's customers appended every PRODUCE_EVERY_S, meanwhile."""
    stop = threading.Event()
    rng = random.Random(7)

    def produce() -> None:
        while not stop.wait(PRODUCE_EVERY_S):
            key = f"C{rng.randrange(300):06d}"
            value = {"trip": "Köln→Zürich", "price": rng.randint(10, 200), "seats": 1}
            append(project, [Record(key, value, START_MS + rng.randrange(6 * HOUR_MS))])

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        yield
    finally:
        stop.set()
        producer.join()


def produce_watched(project: Project) -> dict[str, int]:
    """One booking of each watched key; key -> the position after it in its partition."""
    records = [Record(k, {"price": 1.0}, START_MS) for k in WATCHED]
    return {key: append(project, [record]) for key, record in zip(WATCHED, records, strict=True)}


def append(project: Project, records: list[Record]) -> int:
    """The position after the records (of one partition)."""
    log = open_log(project)
    try:
        partition, _ = log.append(project.topics["bookings"], records).popitem()
        return log.end_offset("bookings", partition)
    finally:
        log.close()
