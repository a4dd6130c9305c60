"""The validation rules a node applies: graphql-core's own, one that closes a gap in them, and
the one that refuses introspection when it is off."""

from __future__ import annotations

from collections.abc import Sequence
from math import isfinite
from typing import Any

from graphql import (
    ASTValidationRule,
    FloatValueNode,
    GraphQLError,
    IntValueNode,
    NoSchemaIntrospectionCustomRule,
    ValidationRule,
    get_named_type,
    specified_rules,
)

from contracts.settings import Settings

FLOAT = "Float"


class FiniteFloats(ValidationRule):
    """A Float literal past a double's range (`1e309`) refused, as the spec asks (a value
    not representable as a finite double is a request error). graphql-core reads it as
    infinity, and lets it through; a condition on it would compare against infinity on one
    node and against null on another, which reads it from the internal request's JSON."""

    def enter_float_value(self, node: FloatValueNode, *_: Any) -> None:
        self._check(node)

    def enter_int_value(self, node: IntValueNode, *_: Any) -> None:
        self._check(node)

    def _check(self, node: FloatValueNode | IntValueNode) -> None:
        expected = get_named_type(self.context.get_input_type())
        if expected is None or expected.name != FLOAT:
            return
        if not isfinite(float(node.value)):
            message = f"Float cannot represent {node.value}: it is past a double's range"
            self.report_error(GraphQLError(message, node))


def node_rules(settings: Settings) -> Sequence[type[ASTValidationRule]]:
    """Every rule a node validates a document with."""
    introspection = [] if settings.introspection else [NoSchemaIntrospectionCustomRule]
    return [*specified_rules, FiniteFloats, *introspection]
