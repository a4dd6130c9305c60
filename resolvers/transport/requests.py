"""A GraphQL-over-HTTP request read from what the client sent, or the transport error that
says precisely what is wrong with it.

POST carries a JSON object {"query", "variables"?, "operationName"?, "extensions"?} (or, when
batching is on, an array of them); GET carries the same as URL parameters, `variables` and
`extensions` JSON-encoded. Anything else is a TransportError with its HTTP status.

A request may name a persisted document by its SHA-256 (resolvers/execution/persisted.py)
instead of, or as well as, sending its query: `extensions.persistedQuery = {"version": 1,
"sha256Hash"}` (Apollo's automatic persisted queries) or `documentId = "sha256:<hex>"`
(GraphQL over HTTP's persisted documents). Sent with a query, the hash must be the query's."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from resolvers.execution.persisted import sha256

JSON = "application/json"
KEYS = ("query", "variables", "operationName", "extensions", "documentId")  # others: ignored
_ENCODED = ("variables", "extensions")  # JSON inside a GET parameter
_HEX = re.compile(r"[0-9a-fA-F]{64}")
_DOCUMENT_ID = re.compile(r"sha256:([0-9a-f]{64})")


class TransportError(Exception):
    """A request that is not a GraphQL request: answered with `status` before any work."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})


def bad_request(message: str) -> TransportError:
    return TransportError(400, "BAD_REQUEST", message)


@dataclass(frozen=True)
class GraphQLRequest:
    query: str | None  # None: `hash` names the document
    variables: dict[str, Any] | None
    operation_name: str | None
    extensions: dict[str, Any] | None
    hash: str | None = None  # the SHA-256 the request names its document by, lower-case hex


def read_get(params: Mapping[str, str]) -> GraphQLRequest:
    """A GET request's URL parameters (other parameters are ignored)."""
    data: dict[str, Any] = {}
    for key in KEYS:
        if key in params:
            data[key] = _json_param(key, params[key]) if key in _ENCODED else params[key]
    return _request(data)


def read_post(
    content_type: str, body: bytes, max_batch: int
) -> GraphQLRequest | list[GraphQLRequest]:
    """A POST request's body: one request, or a batch (a JSON array) when batching is on."""
    if not _json(content_type):
        raise TransportError(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            f"POST a JSON body with Content-Type: {JSON}, not {content_type or 'none'!r}",
        )
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        message = f"the body is not JSON (UTF-8, nested under 1024 levels): {error}"
        raise bad_request(message) from None
    if isinstance(data, list):
        if not max_batch:
            raise bad_request("batching is off on this node: POST one JSON object")
        if not 1 <= len(data) <= max_batch:
            raise bad_request(f"a batch holds 1 to {max_batch} operations (max_batch_size)")
        return [_request(item, f"operation {i} of the batch: ") for i, item in enumerate(data)]
    return _request(data)


def _json(content_type: str) -> bool:
    return content_type == JSON or content_type.split(";")[0].strip().lower() == JSON


def _json_param(name: str, value: str) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        raise bad_request(f"the {name} parameter is not JSON") from None


def _request(data: object, where: str = "") -> GraphQLRequest:
    if not isinstance(data, dict):
        raise bad_request(f"{where}a GraphQL request is a JSON object, not {_kind(data)}")
    query, variables = data.get("query"), data.get("variables")
    name, extensions = data.get("operationName"), data.get("extensions")
    if not (query is None or isinstance(query, str)):
        raise bad_request(f"{where}query must be a string, not {_kind(query)}")
    if not (variables is None or isinstance(variables, dict)):
        raise bad_request(f"{where}variables must be an object, not {_kind(variables)}")
    if not (name is None or isinstance(name, str)):
        raise bad_request(f"{where}operationName must be a string, not {_kind(name)}")
    if not (extensions is None or isinstance(extensions, dict)):
        raise bad_request(f"{where}extensions must be an object, not {_kind(extensions)}")
    hash = persisted_hash(extensions, data.get("documentId"), query, where)
    if query is None and hash is None:
        raise bad_request(
            f"{where}the request has no query, nor the hash of a persisted one "
            "(extensions.persistedQuery.sha256Hash or documentId)"
        )
    return GraphQLRequest(query, variables, name, extensions, hash)


def persisted_hash(
    extensions: object, document_id: object, query: str | None, where: str = ""
) -> str | None:
    """The hash a request names its document by, if any: its extensions' persistedQuery
    (version 1) or its documentId ("sha256:<hex>"), which must agree, and be the query's
    SHA-256 when it has one (else PERSISTED_QUERY_HASH_MISMATCH)."""
    hashes = []
    persisted = extensions.get("persistedQuery") if isinstance(extensions, dict) else None
    if persisted is not None:
        if not isinstance(persisted, dict):
            raise bad_request(
                f"{where}extensions.persistedQuery must be an object, not {_kind(persisted)}"
            )
        version, given = persisted.get("version"), persisted.get("sha256Hash")
        if version != 1 or isinstance(version, bool):
            raise bad_request(f"{where}extensions.persistedQuery.version must be 1")
        if not (isinstance(given, str) and _HEX.fullmatch(given)):
            raise bad_request(
                f"{where}extensions.persistedQuery.sha256Hash must be 64 hexadecimal digits"
            )
        hashes.append(given.lower())
    if document_id is not None:
        matched = _DOCUMENT_ID.fullmatch(document_id) if isinstance(document_id, str) else None
        if matched is None:
            raise bad_request(
                f'{where}documentId must be "sha256:" and 64 lower-case hexadecimal digits'
            )
        hashes.append(matched.group(1))
    if not hashes:
        return None
    if len(set(hashes)) > 1:
        raise bad_request(f"{where}documentId and extensions.persistedQuery name other documents")
    if query is not None and sha256(query) != hashes[0]:
        raise TransportError(
            400,
            "PERSISTED_QUERY_HASH_MISMATCH",
            f"{where}the query's SHA-256 is {sha256(query)}, not the hash sent ({hashes[0]})",
        )
    return hashes[0]


def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )
