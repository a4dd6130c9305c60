"""Stores declared while the cluster runs (README: Changing stores): a node whose project
declares a store the pipeline has not built yet serves every other store, answers that one
NOT_PRESENT with the reason, and serves it, as the oracle computes it from the log, once the
pipeline publishes it; no restart between."""

from __future__ import annotations

import time
from pathlib import Path

from contracts import project as projects
from contracts.errors import Failure
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from tests import oracle
from tests.nodes import Nodes, serve
from tests.wire import as_row, selection

NEW_STORE = """
[[stores]]
name = "seatsByCustomer"
kind = "aggregate"
topic = "bookings"
aggregates = { seats = "sum(seats)", bookings = "count" }
"""
KEYS = ["C000014", "C000021", "Zoë", "gone"]
META = "meta { partial partitions { partition failure message } }"


def test_a_store_declared_before_it_is_built_is_served_once_the_pipeline_builds_it(
    spark: LazySpark, tmp_path: Path
) -> None:
    served = serve(tmp_path, spark, start=False)
    text = served.project.path.read_text()
    served.project.path.write_text(text.replace("\n[settings]", f"{NEW_STORE}\n[settings]", 1))
    grown = projects.load(served.project.path)
    nodes = Nodes(grown, tmp_path)
    try:
        nodes.start_all()  # ready: every partition served, though not every store built
        seats, totals = grown.stores["seatsByCustomer"], grown.stores["customerTotals"]
        fields = " ".join(
            f"{alias}: {store.name}(key: $key) {{ partition {META} "
            f"record {{ {selection(store)} }} }}"
            for alias, store in (("seats", seats), ("totals", totals))
        )
        document = f"query($key: String!) {{ {fields} }}"
        for i, key in enumerate(KEYS):
            data = nodes.data(nodes.ids[i % 3], document, {"key": key})
            assert _row(totals, data["totals"]) == _expected(grown, "customerTotals", key)
            (part,) = data["seats"]["meta"]["partitions"]
            assert data["seats"]["record"] is None and part["failure"] == Failure.NOT_PRESENT
            assert "seatsByCustomer is not built yet in partition" in part["message"], part

        job.run(grown, spark)  # its stores changed: every partition built again, nodes told
        deadline = time.monotonic() + 30
        for i, key in enumerate(KEYS):
            node = nodes.ids[i % 3]
            while (data := nodes.data(node, document, {"key": key}))["seats"]["meta"]["partial"]:
                assert time.monotonic() < deadline, (data, nodes.logs_tail())
                time.sleep(0.2)
            assert _row(seats, data["seats"]) == _expected(grown, "seatsByCustomer", key)
            assert _row(totals, data["totals"]) == _expected(grown, "customerTotals", key)
    finally:
        nodes.stop_all()


def _row(store: projects.Store, answer: dict) -> tuple | None:
    record = answer["record"]
    return None if record is None else as_row(store, record)


def _expected(project: projects.Project, store: str, key: str) -> tuple | None:
    rows = [r for rows in oracle.expected_store(project, store).values() for r in rows]
    return next((r for r in rows if r[0] == key), None)
