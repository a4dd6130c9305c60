"""A GraphQL-over-HTTP request read from what the client sent, or the transport error that
says precisely what is wrong with it.

POST carries a JSON object {"query", "variables"?, "operationName"?, "extensions"?} (or, when
batching is on, an array of them); GET carries the same as URL parameters, `variables` and
`extensions` JSON-encoded. Anything else is a TransportError with its HTTP status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

JSON = "application/json"
KEYS = ("query", "variables", "operationName", "extensions")  # others are ignored
_ENCODED = ("variables", "extensions")  # JSON inside a GET parameter


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
    query: str
    variables: dict[str, Any] | None
    operation_name: str | None
    extensions: dict[str, Any] | None


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
    if content_type.split(";")[0].strip().lower() != JSON:
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
    if query is None:
        raise bad_request(f"{where}the request has no query (persisted queries are not kept)")
    if not isinstance(query, str):
        raise bad_request(f"{where}query must be a string, not {_kind(query)}")
    if not (variables is None or isinstance(variables, dict)):
        raise bad_request(f"{where}variables must be an object, not {_kind(variables)}")
    if not (name is None or isinstance(name, str)):
        raise bad_request(f"{where}operationName must be a string, not {_kind(name)}")
    if not (extensions is None or isinstance(extensions, dict)):
        raise bad_request(f"{where}extensions must be an object, not {_kind(extensions)}")
    return GraphQLRequest(query, variables, name, extensions)


def _kind(value: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else "a number"
    )
