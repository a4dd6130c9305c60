"""A document sent over the WebSocket: parsed, validated against the schema with the node's
limits, its operation picked, and a subscription rewritten as the query it mirrors (the
Subscription type has the Query type's fields, resolvers/schema.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import graphql
import strawberry
from graphql import (
    DocumentNode,
    GraphQLError,
    NamedTypeNode,
    NameNode,
    OperationDefinitionNode,
    OperationType,
    Visitor,
    specified_rules,
)
from graphql.utilities import get_operation_ast

from contracts.settings import Settings
from resolvers import results
from resolvers.schema import introspection_rules, limit_rules


class Refused(Exception):
    """An operation that cannot run: the coded errors to answer with."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors)
        self.errors = errors

    @classmethod
    def coded(cls, code: str, errors: list[GraphQLError]) -> Refused:
        for error in errors:
            error.extensions = {**(error.extensions or {}), "code": code}
        return cls([results.coded(error) for error in errors])


@dataclass(frozen=True)
class Prepared:
    kind: OperationType
    query: str  # the document to run as a query operation


class Checker:
    def __init__(self, schema: strawberry.Schema, settings: Settings) -> None:
        self.schema = schema._schema
        self.rules = [*specified_rules, *limit_rules(settings), *introspection_rules(settings)]

    def prepare(self, query: str, operation_name: str | None) -> Prepared:
        try:
            document = graphql.parse(query)
        except GraphQLError as error:
            raise Refused.coded("GRAPHQL_PARSE_FAILED", [error]) from None
        errors = graphql.validate(self.schema, document, self.rules)
        if errors:
            raise Refused.coded("GRAPHQL_VALIDATION_FAILED", errors)
        operation = get_operation_ast(document, operation_name)
        if operation is None:
            message = (
                f"the document has no operation named {operation_name!r}"
                if operation_name
                else "the document has several operations: name one (operationName)"
            )
            raise Refused.coded("BAD_USER_INPUT", [GraphQLError(message)])
        if operation.operation is OperationType.QUERY:
            return Prepared(OperationType.QUERY, query)
        return Prepared(operation.operation, graphql.print_ast(_as_query(document, operation)))


def _as_query(document: DocumentNode, operation: OperationDefinitionNode) -> DocumentNode:
    query = OperationDefinitionNode(
        operation=OperationType.QUERY,
        name=operation.name,
        variable_definitions=operation.variable_definitions,
        directives=operation.directives,
        selection_set=operation.selection_set,
    )
    rewritten = DocumentNode(
        definitions=tuple(query if d is operation else d for d in document.definitions)
    )
    return cast(DocumentNode, graphql.visit(rewritten, _OnQuery()))  # fragments' conditions


class _OnQuery(Visitor):
    def enter_named_type(self, node: NamedTypeNode, *_: Any) -> NamedTypeNode | None:
        if node.name.value != "Subscription":
            return None
        return NamedTypeNode(name=NameNode(value="Query"))
