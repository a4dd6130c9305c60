"""Demo data: a week of a railway operator's bookings on the topic "bookings", and its
timetable on the topic "trips".

Keys are customer ids ("C000123"); a few customers book a lot (Zipf-like popularity), most
rarely. Values are {"trip": "Berlin→Hamburg", "price": 9.90-249.00, "seats": 1-4}; about 1%
of the records are tombstones (a customer deleted). Timestamps increase over the 7 days
before `end_ms`. The timetable holds every trip between two stations, keyed by the trip:
{"minutes", "fare", "operator"}; a few trips are withdrawn (a tombstone), so the bookings of
those join no timetable record.
"""

from __future__ import annotations

import gc
import itertools
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from contracts.clock import now_ms
from contracts.project import Project, Topic
from contracts.records import Record
from topics import Log, open_log
from topics.kafka import EVENT_TIME, KafkaLog

TOPIC = "bookings"
TRIPS = "trips"
WITHDRAWN_RATE = 0.02  # trips taken out of the timetable
OPERATORS = ("ICE", "IC", "RE", "FlixTrain")
LIVE_RETIMING_RATE = 0.02  # the chance that a live tick changes one trip's fare
CHUNK = 50_000
WEEK_MS = 7 * 86_400_000
TOMBSTONE_RATE = 0.01
LIVE_TICK_S = 0.5  # live bookings are appended in one small batch this often
ZIPF_OFFSET = 50  # weight 1/(rank + 50)^1.1: the busiest customer makes ~0.5% of bookings
STATIONS = (
    "Berlin", "Hamburg", "München", "Köln", "Frankfurt", "Stuttgart", "Düsseldorf", "Leipzig",
    "Dortmund", "Essen", "Bremen", "Dresden", "Hannover", "Nürnberg", "Duisburg", "Bochum",
    "Wuppertal", "Bielefeld", "Bonn", "Münster", "Mannheim", "Karlsruhe", "Augsburg",
    "Wiesbaden", "Mainz", "Kiel", "Rostock", "Erfurt", "Freiburg", "Regensburg",
)  # fmt: skip
SEATS = (1, 2, 3, 4)
SEAT_WEIGHTS = (60, 25, 10, 5)


def generate(
    project: Project,
    customers: int = 50_000,
    events: int = 250_000,
    seed: int = 1,
    end_ms: int | None = None,
    produced: Callable[[int], None] = lambda count: None,
) -> dict[int, int]:
    """Append `events` bookings to the project's log, telling `produced` the count so far
    after each chunk; returns the record count per partition.
    Kafka topics are created first, keeping the producers' timestamps (CreateTime): a
    booking's time is when it was made, a week back for most."""
    topic = project.topics.get(TOPIC)
    if topic is None:
        raise ValueError(f"the demo data needs a topic named {TOPIC!r}")
    log = open_log(project)
    try:
        if isinstance(log, KafkaLog):
            log.create(EVENT_TIME)
        with _no_gc():  # millions of short-lived dicts: the cyclic GC would cost a quarter
            rng = random.Random(seed)
            return _generate(project, log, topic, customers, events, rng, end_ms, produced)
    finally:
        log.close()


def _generate(
    project: Project,
    log: Log,
    topic: Topic,
    customers: int,
    events: int,
    rng: random.Random,
    end_ms: int | None,
    produced: Callable[[int], None],
) -> dict[int, int]:
    start = (now_ms() if end_ms is None else end_ms) - WEEK_MS
    step = WEEK_MS / events
    by_rank = _by_rank(customers, rng)
    cum_weights = list(itertools.accumulate((r + ZIPF_OFFSET) ** -1.1 for r in range(customers)))
    fares = _fares(rng)
    if TRIPS in project.topics:  # its own generator: the bookings stay as they were
        _timetable(project, log, fares, random.Random(rng.random()), start)
    counts: Counter[int] = Counter()
    # Every customer books at least once (when there are enough events), the rest is skewed.
    everyone = by_rank if events >= customers else []
    bookers = everyone + rng.choices(by_rank, cum_weights=cum_weights, k=events - len(everyone))
    rng.shuffle(bookers)
    for first in range(0, events, CHUNK):
        size = min(CHUNK, events - first)
        who = bookers[first : first + size]
        when = [start + int((first + i + rng.random()) * step) for i in range(size)]
        values = _values(rng, fares, size)
        records = [
            Record(f"C{customer:06d}", value, timestamp)
            for customer, value, timestamp in zip(who, values, when, strict=True)
        ]
        counts.update(log.append(topic, records))
        produced(first + size)
    return dict(sorted(counts.items()))


def _by_rank(customers: int, rng: random.Random) -> list[int]:
    """The customers from the busiest to the quietest: the first draw of the week's `rng`."""
    by_rank = list(range(customers))
    rng.shuffle(by_rank)
    return by_rank


@contextmanager
def _no_gc() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _fares(rng: random.Random) -> list[tuple[str, float]]:
    """Every trip between two stations with its usual price."""
    trips = [f"{a}→{b}" for a in STATIONS for b in STATIONS if a != b]
    return [(trip, rng.uniform(12.0, 180.0)) for trip in trips]


def _timetable(
    project: Project, log: Log, fares: list[tuple[str, float]], rng: random.Random, at_ms: int
) -> None:
    """Every trip's timetable record, a few withdrawn right after."""
    entries = [Record(trip, _entry(rng, fare), at_ms) for trip, fare in fares]
    withdrawn = [
        Record(trip, None, at_ms + 1) for trip, _ in fares if rng.random() < WITHDRAWN_RATE
    ]
    log.append(project.topics[TRIPS], entries + withdrawn)


def _entry(rng: random.Random, fare: float) -> dict[str, object]:
    return {
        "minutes": rng.randrange(45, 480, 5),
        "fare": round(fare, 2),
        "operator": rng.choice(OPERATORS),
    }


def _values(
    rng: random.Random, fares: list[tuple[str, float]], size: int
) -> list[dict[str, object] | None]:
    """Booking values, or None (a tombstone) at TOMBSTONE_RATE; prices vary around the fare."""
    random_ = rng.random
    seats = rng.choices(SEATS, weights=SEAT_WEIGHTS, k=size)
    trips = rng.choices(fares, k=size)
    return [
        None
        if random_() < TOMBSTONE_RATE
        else {
            "trip": trip,
            "price": round(min(249.0, max(9.9, fare * (0.55 + 0.9 * random_()))), 2),
            "seats": n,
        }
        for (trip, fare), n in zip(trips, seats, strict=True)
    ]


class LiveBookings:
    """Appends new bookings at `rate` per second, timestamped now, until stopped: the demo's
    stream keeps moving while it runs. Customers book as often as in the week `generate`
    made with `week_seed`: the busiest of the week, its top customers by revenue, book most,
    so the leaderboard moves."""

    def __init__(
        self, project: Project, customers: int, rate: float, seed: int = 2, week_seed: int = 1
    ) -> None:
        self.project = project
        self.customers = customers
        self.rate = rate
        self.appended = 0
        self._rng = random.Random(seed)
        self._by_rank = _by_rank(customers, random.Random(week_seed))
        self._fares = _fares(self._rng)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-bookings", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        log = open_log(self.project)
        try:
            self._produce(log)
        finally:
            log.close()

    def _produce(self, log: Log) -> None:
        topic = self.project.topics[TOPIC]
        weights = [(r + ZIPF_OFFSET) ** -1.1 for r in range(self.customers)]
        every = LIVE_TICK_S
        while not self._stop.wait(every):
            size = max(1, round(self.rate * every))
            log.append(topic, self.batch(size, weights))
            self.appended += size
            if TRIPS in self.project.topics and self._rng.random() < LIVE_RETIMING_RATE:
                log.append(self.project.topics[TRIPS], [self._retimed(now_ms())])

    def batch(self, size: int, weights: list[float] | None = None) -> list[Record]:
        """`size` new bookings, timestamped now (`weights`: each customer's by rank)."""
        weights = weights or [(r + ZIPF_OFFSET) ** -1.1 for r in range(self.customers)]
        who = self._rng.choices(self._by_rank, weights=weights, k=size)
        now = now_ms()
        return [
            Record(f"C{customer:06d}", value, now)
            for customer, value in zip(who, _values(self._rng, self._fares, size), strict=True)
        ]

    def _retimed(self, now: int) -> Record:
        """A new fare for one trip: the timetable, a global store, changes live too."""
        trip, fare = self._rng.choice(self._fares)
        fare *= 0.8 + 0.4 * self._rng.random()
        return Record(trip, _entry(self._rng, fare), now)
