from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from gateway import config
from spark_pipeline import job
from spark_pipeline.session import spark_session
from tests.nodes import Nodes, free_ports
from tests.projects import produce_test_events, write_project


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark for the whole test session; starting one costs ~10 s."""
    yield spark_session("local[2]")


@dataclass
class Served:
    root: Path
    project: config.Project
    nodes: Nodes


def serve(root: Path, spark: SparkSession, seed: int = 1) -> Served:
    """A 3-node cluster on loopback serving a freshly built small project."""
    project = config.load(write_project(root, free_ports(3)))
    produce_test_events(project, seed=seed)
    job.run(project, spark, notify=False)
    nodes = Nodes(project, root)
    for node_id in nodes.ids:
        nodes.start(node_id)
    return Served(root, project, nodes)


@pytest.fixture(scope="session")
def served(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A cluster the read-only tests share: nothing may change its data or its nodes."""
    cluster = serve(tmp_path_factory.mktemp("served"), spark)
    yield cluster
    cluster.nodes.stop_all()
