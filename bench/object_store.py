"""What an object store costs against the folder store, measured in the same run on the same
records (issue 51): the pipeline's first build and its micro-batches, published to a folder
and to a bucket on a real S3 server (S3Proxy on loopback: stategate/s3server.py), and a node
pulling its share of a published manifest into an empty data folder from each.

    python -m bench.object_store --events 200000 --rounds 20 --records 1000

The demo's bookings go to a file log copied into two projects that differ only in
[snapshots] url; each round appends the same records to both and runs the pipeline's
one-shot run on each (in the driver, as a micro-batch this size is), alternating which goes
first. A pull is node1's snapshot sync run in this process against a fresh data folder.
Loopback flatters the bucket (no network), and S3Proxy writes to the same disk: what it
shows is the client's and the protocol's cost, not a WAN's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from contracts import project as projects
from contracts.manifest import FILE_NAME, Manifest
from contracts.project import Project
from contracts.topology import Topology
from gateway.model.topology_view import TopologyView
from gateway.storage.catalog.snapshots import SnapshotCatalog
from gateway.storage.delivery.node_core import NodeCore
from gateway.storage.delivery.switches import Switches
from gateway.storage.delivery.sync import SnapshotSync
from gateway.wire.peers import PeerClient, pooled
from snapshot_store import open_store
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate.demo import PROJECT_TEMPLATE, bookings
from stategate.s3server import S3Server
from topics import open_log

CUSTOMERS = 20_000
PULLS = 3
# Every run in the driver: no Spark start in a figure (the one-shot run's path for a batch)
SETTINGS = "\n[settings]\ndriver_batch_records = 100000000\ncompact_after_deltas = 1000\n"


@dataclass
class Side:
    name: str
    project: Project
    build_s: float = 0.0
    batch_s: list[float] = field(default_factory=list)
    pull_s: list[float] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.object_store")
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--records", type=int, default=1000, help="appended per round")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stategate-bench-") as work:
        root = Path(work)
        server = S3Server(root / "s3")
        server.start()
        os.environ.update(server.env())
        try:
            sides = _sides(root, server)
            print(f"load {os.getloadavg()[0]:.2f} at start", flush=True)
            _measure(sides, args.events, args.rounds, args.records)
        finally:
            server.stop()
    print(f"load {os.getloadavg()[0]:.2f} at the end", flush=True)
    _report(sides, args)
    return 0


def _sides(root: Path, server: S3Server) -> list[Side]:
    kafka = PROJECT_TEMPLATE.read_text().split("\n[snapshots]", 1)
    template = '[log]\ndir = "log"\n\n[snapshots]' + kafka[1] + SETTINGS
    sides = []
    for name in ("folder", "bucket"):
        folder = root / name
        folder.mkdir()
        text = template
        if name == "bucket":
            url = f"{server.bucket('bench')}/snapshots"
            text = text.replace("[snapshots]\n", f'[snapshots]\nurl = "{url}"\n', 1)
        (folder / "stategate.toml").write_text(text)
        (folder / "dashboard").mkdir()  # the template's pages: none served here
        sides.append(Side(name, projects.load(folder / "stategate.toml")))
    return sides


def _measure(sides: list[Side], events: int, rounds: int, records: int) -> None:
    first = sides[0].project
    bookings.generate(first, customers=CUSTOMERS, events=events, end_ms=None)
    for side in sides[1:]:
        shutil.copytree(first.log_dir, side.project.log_dir)
    spark = LazySpark("local[1]")  # never started: every run is in the driver
    for side in sides:
        started = time.monotonic()
        job.run(side.project, spark, notify=False)
        side.build_s = time.monotonic() - started
        print(f"{side.name}: first build {side.build_s:.2f} s", flush=True)
    live = bookings.LiveBookings(first, CUSTOMERS, rate=0)
    for number in range(rounds):
        batch = live.batch(records)
        for side in sides:
            log = open_log(side.project)
            try:
                log.append(side.project.topics[bookings.TOPIC], batch)
            finally:
                log.close()
        for side in sides if number % 2 == 0 else reversed(sides):
            started = time.monotonic()
            job.run(side.project, spark, notify=False)
            side.batch_s.append(time.monotonic() - started)
    for _ in range(PULLS):
        for side in sides:
            side.pull_s.append(_pull(side.project))


def _pull(project: Project) -> float:
    """Seconds node1's sync takes to install its share into an empty data folder."""
    with tempfile.TemporaryDirectory(prefix="stategate-pull-") as folder:
        catalog = SnapshotCatalog(Path(folder), project, 1, "256MB")

        async def pull() -> float:
            peers = PeerClient(project.cluster.secret, pooled(project.settings))
            try:
                topology = TopologyView(Topology.static(project.cluster))
                sync = SnapshotSync(
                    NodeCore(project, "node1", topology, catalog, Switches(), peers)
                )
                started = time.monotonic()
                installed = await sync.run_once()
                took = time.monotonic() - started
                assert installed and not sync.errors, sync.errors
                return took
            finally:
                await peers.aclose()

        try:
            return asyncio.run(pull())
        finally:
            catalog.close()


def _report(sides: list[Side], args: argparse.Namespace) -> None:
    folder, bucket = sides
    print()
    print(f"| {args.events:,} events, then {args.rounds} rounds of {args.records:,} | folder "
          "| bucket (S3Proxy, loopback) | bucket / folder |")  # fmt: skip
    print("| --- | --- | --- | --- |")
    rows = [
        ("first build and publication (driver), s", folder.build_s, bucket.build_s),
        ("micro-batch, p50, s", _p50(folder.batch_s), _p50(bucket.batch_s)),
        ("micro-batch, max, s", max(folder.batch_s), max(bucket.batch_s)),
        ("node1 pulls its share into an empty folder, p50, s",
         _p50(folder.pull_s), _p50(bucket.pull_s)),
    ]  # fmt: skip
    for name, a, b in rows:
        print(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.2f}x |")


def onto_bucket(project: Project, server: S3Server) -> Project:
    """The project with its published snapshots copied to a bucket of `server`, written to
    name the bucket; the AWS variables of `server` set in this process (and so in what it
    starts)."""
    os.environ.update(server.env())
    url = f"{server.bucket('bench')}/{project.path.parent.name}"
    store = open_store(url)
    folder = Path(project.snapshot_store)
    raw = (folder / FILE_NAME).read_bytes()
    for entry in Manifest.from_json(raw).partitions.values():
        for layer in entry.layers:
            store.upload(layer.path, folder / layer.path)
    there = store.read(FILE_NAME)  # a run before this one's copy: replaced
    store.replace(FILE_NAME, raw, there[1] if there else None)
    text = project.path.read_text().replace("[snapshots]\n", f'[snapshots]\nurl = "{url}"\n', 1)
    project.path.write_text(text)
    return projects.load(project.path)


def _p50(values: list[float]) -> float:
    return statistics.median(values)


if __name__ == "__main__":
    raise SystemExit(main())
