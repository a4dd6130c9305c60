"""The demo's example query (stategate/demo/example.graphql), which `stategate demo` prints
and `--check` asks of every node, is valid against the demo project's schema, and every
field it asks says when a partition did not answer (`failure`, or `meta.partial`)."""

from __future__ import annotations

from graphql import FieldNode, OperationDefinitionNode, parse, validate

from contracts import project as projects
from resolvers.schema.build import build_schema
from stategate.demo import PROJECT_TEMPLATE, example_query

SAYS_MISSING = ("failure", "partial")


def test_the_example_is_valid_and_every_field_says_which_partition_is_missing() -> None:
    project = projects.load(PROJECT_TEMPLATE, serving=False)
    document = parse(example_query())
    assert validate(build_schema(project)._schema, document) == []
    (operation,) = document.definitions
    assert isinstance(operation, OperationDefinitionNode)
    silent = []
    for field in operation.selection_set.selections:
        assert isinstance(field, FieldNode)
        asked = _names(field)
        if field.name.value != "timetable" and not asked & set(SAYS_MISSING):  # global: local
            silent.append(field.name.value)
    assert silent == [], f"fields that would hide a missing partition: {silent}"


def _names(field: FieldNode) -> set[str]:
    names = set()
    for child in field.selection_set.selections if field.selection_set else ():
        assert isinstance(child, FieldNode)
        names |= {child.name.value, *_names(child)}
    return names
