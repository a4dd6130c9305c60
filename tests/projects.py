"""A small two-topic test project and deterministic, awkward test data for it."""

from __future__ import annotations

import random
import re
from pathlib import Path

from contracts import project as projects
from contracts.eventlog import Record
from contracts.partitioner import partition_for
from contracts.project import Project
from stategate import certificates, demo
from stategate.etcd import ETCD_HOLDER
from stategate.launcher import free_ports
from topics import open_log
from topics.kafka import EVENT_TIME, KafkaLog

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window boundary
HOUR_MS = 3_600_000

TLS = certificates.table("certs")
_STORES = """
[[topics]]
name = "bookings"
key = "string"
value = { trip = "string", price = "double", seats = "int" }

[[topics]]
name = "trains"
key = "int"
value = { delay = "int", station = "string", cancelled = "boolean" }

[[topics]]
name = "trips"
key = "string"
value = { route = "string", fare = "double", departs = "long" }

[[stores]]
name = "latestBooking"
kind = "table"
topic = "bookings"
index = ["price", "trip"]
joins = { journey = "timetable(trip)" }

[[stores]]
name = "timetable"
kind = "table"
topic = "trips"
global = true
index = ["fare"]

[[stores]]
name = "tripTotals"
kind = "aggregate"
topic = "trips"
global = true
aggregates = { changes = "count", lowestFare = "min(fare)" }

[[stores]]
name = "departures"
kind = "aggregate"
topic = "trips"
aggregates = { changes = "count", latest = "max(departs)" }

[[stores]]
name = "customerTotals"
kind = "aggregate"
topic = "bookings"
aggregates = { bookings = "count", revenue = "sum(price)", seats = "sum(seats)", \
cheapest = "min(price)", dearest = "max(price)" }
index = ["revenue"]

[[stores]]
name = "hourlyRevenue"
kind = "window"
topic = "bookings"
size = "1h"
aggregates = { bookings = "count", revenue = "sum(price)", meanPrice = "avg(price)" }

[[stores]]
name = "trainStatus"
kind = "table"
topic = "trains"
index = ["delay", "cancelled"]

[[stores]]
name = "trainHistory"
kind = "table"
topic = "trains"
history = "4h"

[[stores]]
name = "trainDelays"
kind = "aggregate"
topic = "trains"
aggregates = { reports = "count", totalDelay = "sum(delay)", worstDelay = "max(delay)", \
meanDelay = "avg(delay)" }

[[stores]]
name = "delaysHopping"
kind = "window"
topic = "trains"
size = "1h"
advance = "30m"
aggregates = { reports = "count", totalDelay = "sum(delay)" }
"""

# Unicode, shared prefixes, the empty string and quotes: sorting and lookups must not care.
SPECIAL_CUSTOMERS = ("", "Z", "Zo", "Zoë", "Zoë Müller", "日本語", "🚆 fast", "C0001", "a'b\"c")
SPECIAL_TRAINS = (0, -1, -7, -(2**31), 2**31 - 1)
STATIONS = ("Berlin", "Hamburg", "München", "Köln", "Zürich")
TRAINS = ("", " (night)", " (sleeper)")  # the timetable's kinds of train on a route


SEATS_BY_CUSTOMER = "seatsByCustomer"  # a store the test project does not declare


def with_seats_by_customer(text: str) -> str:
    """A project file's text declaring SEATS_BY_CUSTOMER too (an aggregate of the bookings),
    before its [settings]: a store added to a running deployment."""
    declared = (
        f'\n[[stores]]\nname = "{SEATS_BY_CUSTOMER}"\nkind = "aggregate"\ntopic = "bookings"\n'
        'aggregates = { seats = "sum(seats)", bookings = "count" }\n'
    )
    return text.replace("\n[settings]", f"{declared}\n[settings]", 1)


def write_project(
    root: Path,
    ports: list[int],
    partitions: int = 9,
    replicas: int = 2,
    snapshot_url: str | None = None,
    settings: str = "",
    coordinator: tuple[str, str] | None = None,
    kafka: tuple[str, str] | None = None,
    tls: bool = False,
) -> Path:
    """The project file; `settings` is the body of its [settings] table. Its nodes run one
    worker each unless `settings` says otherwise (tests/test_workers.py runs several). With
    `coordinator` (an etcd URL and the cluster's name there), the cluster is elastic. With
    `kafka` (the bootstrap servers and a prefix of the project's own), its topics are
    Kafka's. With `tls`, every link is mutual TLS, on certificates of a CA of its own in
    `root/certs` (for each node, etcd and the client)."""
    if "workers" not in settings:
        settings = f"workers = 1\n{settings}"
    nodes = "".join(
        f'\n[[cluster.nodes]]\nid = "node{i}"\naddress = "127.0.0.1:{port}"\ndata_dir = "node{i}"\n'
        for i, port in enumerate(ports, start=1)
    )
    text = (
        (f'[kafka]\nbootstrap = "{kafka[0]}"\nprefix = "{kafka[1]}"\n\n' if kafka else "")
        + '[log]\ndir = "log"\n\n[snapshots]\nstore = "snapshots"\n'
        + (f'url = "{snapshot_url}"\n' if snapshot_url else "")
        + "\n"
        "[cluster]\n"
        + (f'coordinator = "{coordinator[0]}"\nname = "{coordinator[1]}"\n' if coordinator else "")
        + f'partitions = {partitions}\nreplicas = {replicas}\nsecret = "test-secret"\n'
        f"{nodes}{_STORES}\n[settings]\n{settings}\n"
    )
    if tls:
        ids = [f"node{i}" for i in range(1, len(ports) + 1)]
        certificates.create(root / "certs", [*ids, ETCD_HOLDER], [])
        text += TLS
    path = root / "stategate.toml"
    path.write_text(text)
    return path


def append(project: Project, topic: str, records: list[Record]) -> None:
    """Append records to the project's log, whichever it is (Kafka, or the file log), with
    Java's partitioner as every producer."""
    log = open_log(project)
    try:
        log.append(project.topics[topic], records)
    finally:
        log.close()


def reading(path: Path, source: Project) -> None:
    """Rewrite the project file at `path` (one write_project wrote, on the file log) to read
    `source`'s log (its folder, or its Kafka topics) and its snapshot store: nodes of their
    own over another cluster's state, nothing built again."""
    text = path.read_text()
    if source.kafka is not None:
        kafka = (
            f'[kafka]\nbootstrap = "{source.kafka.bootstrap}"\nprefix = "{source.kafka.prefix}"\n'
        )
        text = text.replace('[log]\ndir = "log"\n', kafka, 1)
    else:
        text = text.replace('dir = "log"', f'dir = "{source.log_dir}"', 1)
    text = text.replace('store = "snapshots"', f'store = "{source.snapshot_store}"', 1)
    path.write_text(text)


def demo_project(folder: Path, bootstrap: str | None = None) -> Project:
    """The demo's own project file and dashboard (stategate/demo/), on free ports: its topics
    on the Kafka broker at `bootstrap`, or in the file log without one."""
    project = demo.prepare(folder, fresh=False, bootstrap=bootstrap)
    text = project.path.read_text()
    for node, port in zip(project.cluster.nodes, free_ports(3), strict=True):
        text = text.replace(node.address, f"127.0.0.1:{port}")
    if bootstrap is None:
        text = re.sub(r"\[kafka\]\nbootstrap = .*\n", '[log]\ndir = "log"\n', text, count=1)
    project.path.write_text(text)
    return projects.load(project.path)


def produce_test_events(
    project: Project,
    seed: int,
    n_bookings: int = 2500,
    n_trains: int = 800,
    n_trips: int = 120,
    start_ms: int = START_MS,
    only: set[int] | None = None,
) -> dict[str, int]:
    """Append deterministic events over six hours from start_ms, out of order, with tombstones
    and null fields, in three produce calls per topic (so several segments). With `only`, keep
    just the records that route to those partitions. Returns the count per topic."""
    rng = random.Random(seed)
    bookings = [_booking(rng, start_ms) for _ in range(n_bookings)]
    bookings += _deleted_then_reset(start_ms + 2 * HOUR_MS)
    trains = [_train(rng, start_ms) for _ in range(n_trains)]
    trips = [_trip(rng, start_ms) for _ in range(n_trips)]
    counts = {}
    log = open_log(project)
    if isinstance(log, KafkaLog):  # event time is the producer's: windows are by it
        log.create(EVENT_TIME)
    for name, records in (("bookings", bookings), ("trains", trains), ("trips", trips)):
        topic = project.topics[name]
        partitions = project.cluster.partitions
        kept = [
            r
            for r in records
            if only is None or partition_for(r.key, topic.key_type, partitions) in only
        ]
        third = len(kept) // 3 + 1
        for i in range(0, len(kept), third):
            log.append(topic, kept[i : i + third])
        counts[name] = len(kept)
    log.close()
    return counts


def _booking(rng: random.Random, start_ms: int) -> Record:
    special = rng.random() < 0.1
    key = rng.choice(SPECIAL_CUSTOMERS) if special else f"C{rng.randrange(300):06d}"
    if rng.random() < 0.05:
        return Record(key, None, _timestamp(rng, start_ms))
    value: dict = {
        "trip": f"{rng.choice(STATIONS)}→{rng.choice(STATIONS)}",
        "price": round(rng.uniform(9.9, 249.0), 2),
        "seats": rng.randint(1, 4),
    }
    roll = rng.random()
    if roll < 0.04:
        value[rng.choice(["trip", "price", "seats"])] = None
    elif roll < 0.06:
        del value[rng.choice(["trip", "price", "seats"])]
    elif roll < 0.07:
        value["price"] = rng.randint(10, 99)  # a JSON integer in a double field
    return Record(key, value, _timestamp(rng, start_ms))


def _deleted_then_reset(at_ms: int) -> list[Record]:
    """ "Zoë" is set, deleted and set again; "gone" is set then deleted for good."""
    booking = {"trip": "Köln→Zürich", "price": 99.5, "seats": 2}
    return [
        Record("Zoë", booking, at_ms),
        Record("gone", booking, at_ms + 1),
        Record("Zoë", None, at_ms + 2),
        Record("Zoë", {**booking, "seats": 3}, at_ms + 3),
        Record("gone", None, at_ms + 4),
    ]


def _train(rng: random.Random, start_ms: int) -> Record:
    key = rng.choice(SPECIAL_TRAINS) if rng.random() < 0.1 else rng.randrange(-20, 60)
    if rng.random() < 0.05:
        return Record(key, None, _timestamp(rng, start_ms))
    value = {
        "delay": rng.randint(0, 30) if rng.random() < 0.9 else rng.choice([None, -2, 90]),
        "station": rng.choice(STATIONS),
        "cancelled": rng.choice([True, False, None]),
    }
    return Record(key, value, _timestamp(rng, start_ms))


def _trip(rng: random.Random, start_ms: int) -> Record:
    """A timetable entry, set, changed or deleted, of a route the bookings name or of its
    night or sleeper train (which no booking names, but which put trips in every
    partition); no route to Zürich has one, so the bookings of those find none."""
    origin, destination = rng.choice(STATIONS), rng.choice(STATIONS[:-1])
    key = f"{origin}→{destination}{rng.choice(TRAINS)}"
    if rng.random() < 0.1:
        return Record(key, None, _timestamp(rng, start_ms))
    value = {
        "route": f"{origin} to {destination}",
        "fare": round(rng.uniform(19.0, 149.0), 2),
        "departs": start_ms + rng.randrange(48) * HOUR_MS // 2,
    }
    return Record(key, value, _timestamp(rng, start_ms))


def _timestamp(rng: random.Random, start_ms: int) -> int:
    """Mostly random within six hours; one in ten exactly on a half-hour boundary."""
    if rng.random() < 0.1:
        return start_ms + rng.randrange(12) * HOUR_MS // 2
    return start_ms + rng.randrange(6 * HOUR_MS)
