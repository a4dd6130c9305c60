from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_pipeline.session import spark_session
from tests.nodes import Served, serve


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark for the whole test session; starting one costs ~10 s."""
    yield spark_session("local[2]")


@pytest.fixture(scope="session")
def served(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A cluster the read-only tests share: nothing may change its data or its nodes."""
    cluster = serve(tmp_path_factory.mktemp("served"), spark)
    yield cluster
    cluster.nodes.stop_all()
