"""Tricky but legal names answer: Python keywords as stores, value fields and aggregates, a
store whose name extends another's, an aggregate named like a window field in another case.
The pipeline builds them and a real node serves them; answers are compared with the oracle."""

from __future__ import annotations

from pathlib import Path

from contracts import eventlog
from contracts import project as projects
from contracts.eventlog import Record
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate.launcher import free_ports, wait_serving
from tests import wire
from tests.nodes import Nodes
from tests.oracle import expected_store
from tests.projects import HOUR_MS, START_MS

PROJECT = """
[cluster]
partitions = 2
secret = "test-secret"
nodes = [{{ id = "n1", address = "127.0.0.1:{port}", data_dir = "n1" }}]

[[topics]]
name = "t"
value = {{ from = "int", class = "string", None = "boolean" }}

[[stores]]
name = "class"
kind = "table"
topic = "t"

[[stores]]
name = "orders"
kind = "aggregate"
topic = "t"
aggregates = {{ def = "sum(from)", windowStart = "count" }}

[[stores]]
name = "ordersX"
kind = "aggregate"
topic = "t"
aggregates = {{ lambda = "max(from)" }}

[[stores]]
name = "from"
kind = "window"
topic = "t"
size = "1h"
aggregates = {{ WindowStart = "min(from)", type = "count" }}
"""
KEYS = ["a", "b", "c", "from", "None"]


def test_keyword_names_are_built_and_served(spark: LazySpark, tmp_path: Path) -> None:
    path = tmp_path / "stategate.toml"
    path.write_text(PROJECT.format(port=free_ports(1)[0]))
    project = projects.load(path)
    values = [{"from": i, "class": f"c{i}", "None": i % 2 == 0} for i in range(20)]
    records = [Record(KEYS[i % 5], v, START_MS + i * HOUR_MS // 4) for i, v in enumerate(values)]
    eventlog.produce(project.log_dir, project.topics["t"], project.cluster.partitions, records)
    job.run(project, spark, notify=False)
    nodes = Nodes(project, tmp_path)
    try:
        nodes.start("n1")
        wait_serving(project, ["n1"])
        data = nodes.data(
            "n1",
            """{
              class: classRange(first: 100) { records { key from class None } }
              orders: ordersRange(first: 100) { records { key def windowStart } }
              ordersX: ordersXRange(first: 100) { records { key lambda } }
              from: fromAll(from: "2020-01-01T00:00:00Z", to: "2030-01-01T00:00:00Z",
                            first: 100) { records { key windowStart WindowStart type } }
            }""",
        )
    finally:
        nodes.stop_all()
    for store in ("class", "orders", "ordersX"):
        expected = sorted(row for rows in expected_store(project, store).values() for row in rows)
        types = {"key": "string", **project.stores[store].columns}
        answered = sorted(
            tuple(wire.field(types[name], value) for name, value in record.items())
            for record in data[store]["records"]
        )
        assert answered == expected, store
    windows = sorted(row for rows in expected_store(project, "from").values() for row in rows)
    answered = sorted(
        (r["key"], r["WindowStart"], wire.long(r["type"])) for r in data["from"]["records"]
    )
    assert answered == [(key, *values) for key, _, *values in windows]
    assert len(answered) > 5
