"""Persisted operations: a request may name its document by the SHA-256 of its text instead of
sending it, and a project may register the operations of an operations file and run nothing
else.

- **Automatic persisted queries** (Apollo's protocol, which Apollo Client, urql and the
  graphql-codegen clients speak; requests.py reads the hash). A hash alone runs the document
  this node remembers by it, or is refused with PERSISTED_QUERY_NOT_FOUND, on which the
  client sends the hash again with the full text: the reader checked the text hashes to it,
  and once the text has passed every check (parse, validation, limits) the node remembers it,
  `persisted_query_cache_size` of them, least recently used out first.
- **The registry**: each named operation of the `operations` file, with the fragments it
  spreads, registered under the SHA-256 of its canonical text (`canonical`) and recognized
  by that hash, or as text in any formatting (its canonical text is compared, from the
  parsed document the node caches anyway). With `allow_list`, only registered operations
  run, and the text that runs is always the registered one: anything else is refused with
  OPERATION_NOT_ALLOWED before it is validated, measured or run. A client's own hash of a
  registered operation's text (Apollo Client hashes the text it sends) is still remembered,
  as another name for that operation: no hash ever names an unregistered document.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

import graphql
from graphql import (
    ASTValidationRule,
    DocumentNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    Visitor,
    print_ast,
)

from contracts.entries import ConfigError
from resolvers.execution.lru import LRU, Recent
from resolvers.execution.results import Refused

NOT_FOUND = "PERSISTED_QUERY_NOT_FOUND"
NOT_ALLOWED = "OPERATION_NOT_ALLOWED"
NOT_FOUND_OUTCOME = "persisted_query_not_found"  # the metrics' outcomes of the two
NOT_ALLOWED_OUTCOME = "not_allowed"
MAX_REMEMBERED_CHARS = 65_536  # a longer document runs, but is not remembered by its hash
Parse = Callable[[str], DocumentNode | GraphQLError]


def sha256(text: str) -> str:
    """The lower-case hex SHA-256 of a text's UTF-8 (a lone surrogate as Python encodes it)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Registered:
    """One operation of the operations file."""

    name: str
    hash: str  # lower-case hex SHA-256 of `text`, UTF-8
    text: str  # its canonical text
    kind: OperationType


class Registry:
    """The registered operations, by hash and by canonical text."""

    def __init__(self, operations: Iterable[Registered] = ()) -> None:
        self.operations = tuple(operations)
        self.by_hash = {op.hash: op for op in self.operations}
        self.by_text = {op.text: op for op in self.operations}


@dataclass(frozen=True)
class Source:
    """The document a request runs, once resolved: its text, the operation it names, and
    the hash to remember the text by once it has passed every check (None: nothing new)."""

    query: str
    name: str | None
    remember: str | None = None


def canonical(document: DocumentNode, operation: OperationDefinitionNode) -> str | None:
    """An operation's canonical text: graphql-core's print_ast of a document holding the
    operation, then every fragment it spreads (directly or through other fragments) sorted
    by name. None when it spreads a fragment the document does not define."""
    fragments = _fragments(document)
    used = _used(operation, fragments)
    return None if used is None else print_ast(_alone(operation, fragments, used))


class Persisted:
    """A node's persisted documents: the registry, and the documents clients sent with a
    hash. `parse` is the node's cached parse (resolvers/execution/operations.py)."""

    def __init__(
        self, registry: Registry, allow_list: bool, remembered: int, cached: int, parse: Parse
    ) -> None:
        self.registry = registry
        self.allow_list = allow_list
        self.remembered: Recent[str, str] = Recent(remembered)
        self._parse = parse
        self._matched = LRU(max(1, cached), self._match)

    def resolve(self, query: str | None, name: str | None, hash: str | None) -> Source:
        """What a request runs, or Refused (PERSISTED_QUERY_NOT_FOUND, OPERATION_NOT_ALLOWED).
        A hash sent with a query was checked against it (requests.py)."""
        remember = hash
        if query is None:
            assert hash is not None, "a request without a query names its document by a hash"
            registered = self.registry.by_hash.get(hash)
            if registered is not None:
                return Source(registered.text, name or registered.name)
            query, remember = self.remembered.get(hash), None
            if query is None:
                # 200 whatever the media type, as Apollo Server answers: the client's cue to
                # send the text, not a failure (older Apollo Clients stop hashing on a 400)
                raise Refused.one(
                    NOT_FOUND, "PersistedQueryNotFound", status=200, outcome=NOT_FOUND_OUTCOME
                )
        if hash in self.registry.by_hash:
            remember = None
        if not self.allow_list:
            return Source(query, name, remember)
        matched = self._matched((query, name))
        if matched is None:
            raise Refused.one(
                NOT_ALLOWED,
                "this node runs only the operations registered in its operations file "
                "(settings.allow_list): send one of them, by hash or as text",
                status=403,
                outcome=NOT_ALLOWED_OUTCOME,
            )
        return Source(matched.text, matched.name, remember)

    def remember(self, source: Source) -> None:
        """Remember a document by the hash it came with, once it passed every check."""
        if source.remember is not None and len(source.query) <= MAX_REMEMBERED_CHARS:
            self.remembered.put(source.remember, source.query)

    def _match(self, key: tuple[str, str | None]) -> Registered | None:
        query, name = key
        registered = self.registry.by_text.get(query)
        if registered is not None:
            return registered if name in (None, registered.name) else None
        document = self._parse(query)
        if isinstance(document, GraphQLError):
            return None
        operation = graphql.utilities.get_operation_ast(document, name)
        text = None if operation is None else canonical(document, operation)
        return None if text is None else self.registry.by_text.get(text)


def load(path: Path, schema: GraphQLSchema, rules: Collection[type[ASTValidationRule]]) -> Registry:
    """The registry of an operations file, each operation validated against the schema; a
    ConfigError naming the file (and the operation) when it cannot be."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
        raise ConfigError(f"{path}: {reason} (settings.operations)") from exc
    try:
        document = graphql.parse(graphql.Source(text, str(path)))
    except GraphQLError as error:
        raise ConfigError(f"{path}: {_one_line(error)}") from None
    fragments = _fragments(document)
    operations: dict[str, OperationDefinitionNode] = {}
    for definition in document.definitions:
        if isinstance(definition, FragmentDefinitionNode):
            if fragments[definition.name.value] is not definition:
                raise ConfigError(f"{path}: fragment {definition.name.value!r} is defined twice")
        elif not isinstance(definition, OperationDefinitionNode):
            line = _line(definition)
            raise ConfigError(f"{path}: {line}only operations and fragments belong in it")
        elif definition.name is None:
            line = _line(definition)
            raise ConfigError(f"{path}: {line}an operation without a name (it is registered by it)")
        elif definition.name.value in operations:
            raise ConfigError(f"{path}: operation {definition.name.value!r} is defined twice")
        else:
            operations[definition.name.value] = definition
    if not operations:
        raise ConfigError(f"{path}: no operation to register")
    registered = []
    for name, operation in operations.items():
        used = _used(operation, fragments, known_only=True)
        assert used is not None
        alone = _alone(operation, fragments, used)
        errors = graphql.validate(schema, alone, rules)
        if errors:
            raise ConfigError(f"{path}: operation {name!r}: {_one_line(errors[0])}")
        canonical_text = print_ast(alone)
        kind = operation.operation
        registered.append(Registered(name, sha256(canonical_text), canonical_text, kind))
    return Registry(registered)


def _alone(
    operation: OperationDefinitionNode,
    fragments: dict[str, FragmentDefinitionNode],
    used: set[str],
) -> DocumentNode:
    """A document of the operation and the fragments it uses, sorted by name."""
    return DocumentNode(definitions=(operation, *(fragments[name] for name in sorted(used))))


def _fragments(document: DocumentNode) -> dict[str, FragmentDefinitionNode]:
    """The fragments of a document by name (the first of each name)."""
    fragments: dict[str, FragmentDefinitionNode] = {}
    for definition in document.definitions:
        if isinstance(definition, FragmentDefinitionNode):
            fragments.setdefault(definition.name.value, definition)
    return fragments


def _used(
    operation: OperationDefinitionNode,
    fragments: dict[str, FragmentDefinitionNode],
    known_only: bool = False,
) -> set[str] | None:
    """The names of the fragments an operation spreads, directly or not; None when one is
    not defined (unless `known_only`: then the defined ones)."""
    used: set[str] = set()
    pending: list[OperationDefinitionNode | FragmentDefinitionNode] = [operation]
    while pending:
        spreads = _Spreads()
        graphql.visit(pending.pop(), spreads)
        for name in spreads.names:
            if name not in fragments:
                if known_only:
                    continue
                return None
            if name not in used:
                used.add(name)
                pending.append(fragments[name])
    return used


class _Spreads(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def enter_fragment_spread(self, node: FragmentSpreadNode, *_: object) -> None:
        self.names.append(node.name.value)


def _line(node: graphql.Node) -> str:
    return "" if node.loc is None else f"line {node.loc.start_token.line}: "


def _one_line(error: GraphQLError) -> str:
    message = " ".join(error.message.split())
    where = ", ".join(f"line {at.line}, column {at.column}" for at in error.locations or ())
    return f"{message} ({where})" if where else message
