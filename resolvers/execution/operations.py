"""A GraphQL operation from its text to its result, the same over every transport (HTTP,
WebSocket, subscriptions re-evaluated).

A request's document is its text, or the one its hash names (resolvers/execution/persisted.py; with
`allow_list`, only registered operations run). The text is parsed once (a bounded number of
tokens), its operation picked, its shape measured (resolvers/execution/cost.py) and the request
refused above the node's limits before any other work; then the document is validated once,
its executor chosen once (resolvers/execution/executors.py), and the operation runs within
the request deadline. A subscription runs as the query it mirrors (the
Subscription type has the Query type's fields, resolvers/schema/build.py). Every refusal is a
Refused with coded errors.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import graphql
import strawberry
from graphql import (
    DocumentNode,
    FieldNode,
    GraphQLError,
    NamedTypeNode,
    NameNode,
    OperationDefinitionNode,
    OperationType,
    Visitor,
)
from strawberry.types import ExecutionResult

from contracts.settings import Settings
from gateway.runtime.lanes import SMALL_BULK_VALUES
from resolvers.execution.cost import Cost, RowsOf, Shape, shape
from resolvers.execution.executors import Compiled, Executor, General
from resolvers.execution.key_lookup import KeyLookup, key_lookup
from resolvers.execution.lru import LRU, Recent
from resolvers.execution.persisted import Persisted, Registry, Source, load
from resolvers.execution.plans import compile_plan
from resolvers.execution.results import Refused as Refused
from resolvers.execution.results import past_deadline, response_extensions
from resolvers.execution.rules import node_rules
from resolvers.schema.context import Context

MIB = 2**20
# What a cached document holds, parsed, validated and compiled, per character of its text
# (measured: 140 to 180 bytes, from 10 to 2000 aliased lookups; bench/RESULTS.md).
CACHED_BYTES_PER_CHARACTER = 160
# A document whose share of the budget is more than this fraction of it is kept from its
# second request on (a 1000-alias one of 90 KB takes 14 MB: most of a worker's 32).
LARGE_SHARE = 16
SEEN_LARGE = 1024  # large documents remembered as seen once (by their text's hash)


@dataclass(frozen=True)
class Prepared:
    """An operation that passed every check: what runs, and what it is."""

    query: str  # the text as sent
    name: str | None
    kind: OperationType
    document: DocumentNode  # a subscription's rewritten as the query it mirrors
    cost: int  # what max_request_cost is held against
    values: int  # of it, the values the response may hold: what bulk_request_cost weighs
    executor: Executor
    fields: frozenset[str]  # every field name the document holds: the joins it may select

    @property
    def key_read(self) -> KeyLookup | None:
        """The plan of a query whose one root field reads one key, and nothing else."""
        executor = self.executor
        if self.kind is not OperationType.QUERY or not isinstance(executor, Compiled):
            return None
        key = executor.key
        return key if key is not None and len(key.fields) == 1 else None

    @property
    def lone(self) -> bool:
        """Whether one root field reads (a compiled plan's): its reads come one at a time."""
        return isinstance(self.executor, Compiled) and len(self.executor.plan.fields) == 1


@dataclass(frozen=True)
class _Picked:
    operation: OperationDefinitionNode | None
    shape: Shape | GraphQLError | None
    document: DocumentNode
    fields: frozenset[str] = frozenset()


class Operations:
    def __init__(
        self,
        schema: strawberry.Schema,
        settings: Settings,
        operations_file: Path | None = None,
        rows_of: RowsOf = lambda store: 0,
        workers: int = 1,
    ) -> None:
        """`operations_file`: the operations to register (resolvers/execution/persisted.py); a
        ConfigError when one does not validate. `rows_of`: a store's rows in the cluster, what
        a request reading it whole costs (resolvers/execution/cost.py). `workers`: the node's
        processes, each of which keeps its share of `document_cache_mb`."""
        self.settings = settings
        self.rows_of = rows_of
        self._serve(schema)
        self.rules = node_rules(settings)
        size = max(1, settings.document_cache_size)
        budget = settings.document_cache_mb * MIB // CACHED_BYTES_PER_CHARACTER // workers
        self._parsed = LRU(size, self._parse, len, budget)
        self._picked = LRU(size, self._pick, _text_length, budget)
        self._errors = LRU(size, self._validate, len, budget)
        self._executors = LRU(size, self._executor, _text_length, budget)
        # operations whose checks give the same answer whatever the request's variables
        self._ready: LRU[tuple[str, str | None], Prepared] = LRU(size, None, _text_length, budget)
        self._large = budget // LARGE_SHARE
        self._seen_once: Recent[int, bool] = Recent(SEEN_LARGE)
        registry = Registry()
        if operations_file is not None:
            registry = load(operations_file, self.core, self.rules)
        self.persisted = Persisted(
            registry,
            settings.allow_list,
            settings.persisted_query_cache_size,
            settings.document_cache_size,
            self._parsed,
        )

    def _serve(self, schema: strawberry.Schema) -> None:
        self.schema = schema
        self.core = schema._schema
        assert self.core.query_type is not None
        self.fields = self.core.query_type.fields

    def switch(self, schema: strawberry.Schema) -> None:
        """Serve `schema` from the next request on (README: Changing stores): documents are
        validated and compiled against it again; the registered operations, checked against
        the declared stores' schema when the node started, stand."""
        self._serve(schema)
        self._errors.clear()
        self._executors.clear()
        self._ready.clear()

    def take(self, settings: Settings) -> None:
        """Hold requests to `settings`' limits from the next one on (a reload)."""
        self.settings = settings
        self._ready.clear()

    def resolve(self, query: str | None, name: str | None, hash: str | None = None) -> Source:
        """The document a request runs: its query, or the one its hash names; Refused when
        the hash names none, or with `allow_list` when the operation is not registered."""
        return self.persisted.resolve(query, name, hash)

    def prepare(self, source: Source, variables: dict[str, Any] | None) -> Prepared:
        """The checked operation, or Refused: parse, pick, measure, validate. A document
        sent with a hash is remembered by it once it passed. An operation whose cost is
        fixed passes or fails every request alike: once it passed, it is ready at once."""
        ready = self._ready_for(source)
        if ready is not None:
            return ready
        try:
            return self._prepare(source, variables)
        finally:
            self._admit(source)

    def _admit(self, source: Source) -> None:
        """Keep a large document's parts from its second request on: one sent once (a
        generated document, its keys written into its text) would push the documents
        clients repeat out of the budget, and hold its memory until they pushed it back."""
        query, name = source.query, source.name
        if len(query) <= self._large or self._seen_once.get(hash(query)):
            return
        self._seen_once.put(hash(query), True)
        for cache in (self._parsed, self._errors):
            cache.pop(query)
        for by_name in (self._picked, self._executors, self._ready):
            by_name.pop((query, name))

    def _prepare(self, source: Source, variables: dict[str, Any] | None) -> Prepared:
        query, name = source.query, source.name
        parsed = self._parsed(query)
        if isinstance(parsed, GraphQLError):
            raise Refused.coded("GRAPHQL_PARSE_FAILED", [parsed])
        picked = self._picked((query, name))
        if picked.operation is None:
            self._check(query)  # a document of no operation fails here (a fragment unused)
            message = (
                f"the document has no operation named {name!r}"
                if name
                else "the document has several operations: name one (operationName)"
            )
            raise Refused.one("BAD_USER_INPUT", message)
        cost = self._measure(picked.shape, variables or {})
        self._check(query)
        self.persisted.remember(source)
        executor = self._executors((query, name))
        operation = picked.operation.operation
        document, fields = picked.document, picked.fields
        prepared = Prepared(
            query, name, operation, document, cost.total, cost.values, executor, fields
        )
        if isinstance(picked.shape, Shape) and picked.shape.fixed(self.fields):
            self._ready.put((query, name), prepared)
        return prepared

    def _check(self, query: str) -> None:
        """Refused when the document does not validate."""
        errors = self._errors(query)
        if errors:
            raise Refused.coded("GRAPHQL_VALIDATION_FAILED", list(errors))

    def ready(self, query: str | None, name: str | None, hash: str | None) -> Prepared | None:
        """The operation a request runs, as prepare() gives it, when it was prepared before
        and its cost is fixed (no check to make again); None otherwise, or Refused."""
        return self._ready_for(self.resolve(query, name, hash))

    def _ready_for(self, source: Source) -> Prepared | None:
        """The ready operation of a document, remembered by its hash as prepare() does, and
        made the newest in every cache that holds its parts too: so that they keep what the
        ready one holds, and the documents kept stay within the one budget."""
        key = (source.query, source.name)
        ready = self._ready.get(key)
        if ready is not None:
            self.persisted.remember(source)
            self._parsed.get(source.query)
            self._picked.get(key)
            self._executors.get(key)
        return ready

    def invalid(self, document: DocumentNode) -> tuple[GraphQLError, ...]:
        """What the schema served now finds wrong with a document prepared before it."""
        return tuple(graphql.validate(self.core, document, self.rules))

    def kind(self, query: str, name: str | None) -> OperationType | None:
        """The kind of the operation the request names, when the document has it."""
        if isinstance(self._parsed(query), GraphQLError):
            return None
        operation = self._picked((query, name)).operation
        return None if operation is None else operation.operation

    async def execute(
        self, prepared: Prepared, context: Context, variables: dict[str, Any] | None
    ) -> ExecutionResult:
        """Run a prepared operation by its executor, within the deadline."""
        deadline = self.settings.request_timeout_s
        bulk = prepared.values > self.settings.bulk_request_cost
        try:
            context.queries.selected = prepared.fields  # the joins its results carry
            async with asyncio.timeout(deadline):
                with context.node.lanes.enter(bulk, prepared.values <= SMALL_BULK_VALUES):
                    return await prepared.executor.run(context, variables)
        except TimeoutError:
            return past_deadline(deadline, response_extensions(context))

    def _measure(self, measured: Shape | GraphQLError | None, variables: dict[str, Any]) -> Cost:
        if isinstance(measured, GraphQLError):
            raise Refused.coded("GRAPHQL_VALIDATION_FAILED", [measured])
        assert measured is not None
        settings = self.settings
        if measured.depth > settings.max_query_depth:
            message = f"the document is {measured.depth} levels deep (max_query_depth is "
            raise Refused.one("GRAPHQL_VALIDATION_FAILED", f"{message}{settings.max_query_depth})")
        if measured.aliases > settings.max_aliases:
            raise Refused.one(
                "GRAPHQL_VALIDATION_FAILED",
                f"the document has {measured.aliases} aliases, fragments expanded "
                f"(the limit is max_aliases, {settings.max_aliases})",
            )
        cost = measured.cost(self.fields, variables, self.rows_of)
        if cost.total > settings.max_request_cost:
            raise Refused.one(
                "COST_LIMIT_EXCEEDED",
                f"the request may return {cost.total} values, over max_request_cost "
                f"({settings.max_request_cost}): ask for fewer keys, smaller pages or "
                "fewer aliases (a filter, or an order by a column without an index, reads "
                "every row of its store)",
                cost=cost.total,
                limit=settings.max_request_cost,
            )
        return cost

    def _parse(self, query: str) -> DocumentNode | GraphQLError:
        try:
            return graphql.parse(query, max_tokens=self.settings.max_document_tokens)
        except GraphQLError as error:
            return error
        except RecursionError:
            return GraphQLError("the document is nested too deeply to parse")

    def _pick(self, key: tuple[str, str | None]) -> _Picked:
        query, name = key
        document = self._parsed(query)
        assert not isinstance(document, GraphQLError)
        operation = graphql.utilities.get_operation_ast(document, name)
        if operation is None:
            return _Picked(None, None, document)
        try:
            measured: Shape | GraphQLError = shape(operation, document.definitions)
        except GraphQLError as error:
            measured = error
        if operation.operation is OperationType.SUBSCRIPTION:
            document = _as_query(document, operation)
        return _Picked(operation, measured, document, _field_names(document))

    def _executor(self, key: tuple[str, str | None]) -> Executor:
        """The compiled plan of a validated operation when it has one; graphql-core's
        executor for the rest, and for any text with a directive (@skip, @include, @defer
        bind at run time)."""
        query, name = key
        picked = self._picked(key)
        general = General(self.core, picked.document, name)
        plan = None if "@" in query else compile_plan(self.schema, picked.document, name)
        if plan is None:
            return general
        return Compiled(plan, self.schema, general, key_lookup(plan, picked.fields))

    def _validate(self, query: str) -> tuple[GraphQLError, ...]:
        document = self._parsed(query)
        assert not isinstance(document, GraphQLError)
        return tuple(graphql.validate(self.core, document, self.rules))


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


def _field_names(document: DocumentNode) -> frozenset[str]:
    """The names of every field the document selects, in any operation or fragment."""
    names: set[str] = set()

    class Names(Visitor):
        def enter_field(self, node: FieldNode, *_: Any) -> None:
            names.add(node.name.value)

    graphql.visit(document, Names())
    return frozenset(names)


class _OnQuery(Visitor):
    def enter_named_type(self, node: NamedTypeNode, *_: Any) -> NamedTypeNode | None:
        if node.name.value != "Subscription":
            return None
        return NamedTypeNode(name=NameNode(value="Query"))


def _text_length(key: tuple[str, str | None]) -> int:
    """A (document, operation name) key's weight: its document's length."""
    return len(key[0])
