"""Two tiers: tests/unit/ runs in seconds without Spark or processes (`pytest -m "not e2e"`);
every other test runs real Spark and real nodes, and is marked e2e here.

The suite runs on two xdist workers, a module at a time on one worker (its fixtures are
module-scoped): an e2e test waits on its processes about half of the time."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent / "unit"
# Every JVM the tests start (Spark's drivers, a standalone cluster's master, worker and
# executors) lives for seconds to minutes: compiled by C1 alone, a Spark session and three
# small builds cost 14 JVM CPU-s instead of 23, in less time. What runs is unchanged.
os.environ.setdefault("JDK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
# The longest modules (2-3 min each, measured) start first, so both workers end together.
LONGEST_FIRST = ("test_partitions", "test_readme", "test_elastic", "test_follow", "test_stop")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if UNIT not in item.path.parents:
            item.add_marker(pytest.mark.e2e)
    items.sort(key=start_rank)  # stable: each module's tests keep their order


def start_rank(item: pytest.Item) -> int:
    name = item.path.stem
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


@pytest.fixture(scope="session")
def spark() -> object:
    """One local Spark for the whole test session, started when a test first needs its
    executors (a run of a few thousand records is built in the driver, as the pipeline's
    would be): a start costs ~7 s and ~20 CPU-s, its Python workers ~10 CPU-s more."""
    from spark_pipeline.spark import LazySpark

    return LazySpark("local[2]")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real S3 API server for the module (stategate/s3server.py: S3Proxy, about a second
    to start), its AWS variables set for this process and those it starts meanwhile."""
    from stategate.s3server import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3"))
    server.start()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in server.env().items():
            patch.setenv(name, value)
        yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One real Kafka broker for the test process (stategate/broker.py), started when a test
    first needs it: 2-4 s, ~170 MiB."""
    from tests.kafka import shared

    broker = shared()  # the one tests/nodes.py's clusters produce to
    yield broker
    from tests.oracle import close_kafka

    close_kafka()
    broker.stop()


@pytest.fixture(scope="session")
def served(spark: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A cluster the read-only tests share: nothing may change its data or its nodes."""
    from tests.nodes import serve

    cluster = serve(tmp_path_factory.mktemp("served"), spark)  # type: ignore[arg-type]
    yield cluster
    cluster.nodes.stop_all()
