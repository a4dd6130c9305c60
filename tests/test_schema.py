"""schema.graphql is the exported SDL of the demo stores; it must not drift."""

from __future__ import annotations

from pathlib import Path

from graphql import (
    build_client_schema,
    build_schema,
    get_introspection_query,
    lexicographic_sort_schema,
    print_schema,
)

from contracts import project as config
from resolvers.schema.build import sdl
from stategate.demo import PROJECT_TEMPLATE as DEMO_CONFIG

ROOT = Path(__file__).resolve().parent.parent


def test_schema_graphql_matches_the_running_schema() -> None:
    expected = sdl(config.load(DEMO_CONFIG))
    assert (ROOT / "schema.graphql").read_text() == expected, "run `make schema`"


def test_running_nodes_serve_the_same_sdl_as_the_export(served) -> None:
    body = served.nodes.data(
        "node1", get_introspection_query(descriptions=True, specified_by_url=True)
    )
    running = print_schema(lexicographic_sort_schema(build_client_schema(body)))
    exported = print_schema(lexicographic_sort_schema(build_schema(sdl(served.project))))
    assert running == exported
