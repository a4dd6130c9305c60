"""Two tiers: tests/unit/ runs in seconds without Spark or processes (`pytest -m "not e2e"`);
every other test runs real Spark and real nodes, and is marked e2e here."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent / "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if UNIT not in item.path.parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local Spark for the whole test session; starting one costs ~10 s."""
    from spark_pipeline.session import spark_session

    yield spark_session("local[2]")


@pytest.fixture(scope="session")
def served(spark: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A cluster the read-only tests share: nothing may change its data or its nodes."""
    from tests.nodes import serve

    cluster = serve(tmp_path_factory.mktemp("served"), spark)  # type: ignore[arg-type]
    yield cluster
    cluster.nodes.stop_all()
