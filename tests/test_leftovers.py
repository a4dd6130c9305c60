"""A pipeline killed while writing a layer leaves its temporary file behind; the next start
removes such leftovers past the grace period and keeps a fresh one (a writer at work)."""

from __future__ import annotations

from pathlib import Path

from contracts.project import load
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from tests.projects import produce_test_events, write_project
from tests.unit.test_leftovers import layout


def test_a_start_removes_the_leftovers_of_a_killed_writer(spark: LazySpark, tmp_path: Path) -> None:
    project = load(write_project(tmp_path, [18401], 3, 1))
    produce_test_events(project, seed=9, n_bookings=60, n_trains=20)
    files = layout(Path(project.snapshot_store))
    job.run(project, spark, notify=False)
    assert [p for p in files["gone"] if p.exists()] == []
    assert [p for p in files["kept"] if not p.exists()] == []
