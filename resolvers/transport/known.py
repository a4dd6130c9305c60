"""Known reads: the shortest way through a node, from a request's bytes to its answer's.

A POST of one plain request (a document's text, its variables, an operation name; no hash)
whose document this node prepared before, and whose operation reads one key and nothing
else (a KeyLookup of one field), on a node without [auth] and without tracing: when the
node reads the key from its own memory at once (it is the first replica of the key's
partition: no hop), the answer is read, completed and encoded here, with no session,
context, batch, task or deadline made for it, as no await comes between the body and the
answer. Anything else returns None, before anything was counted or had an effect, and the
general path (endpoint.py) answers. Both give the same bytes (tests/test_known.py).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from contracts import tracing
from gateway.node import GatewayNode
from resolvers.execution import results
from resolvers.execution.operations import Operations, Refused
from resolvers.transport.requests import JSON


class KnownReads:
    def __init__(self, node: GatewayNode, operations: Operations) -> None:
        self.node = node
        self.operations = operations

    def answer(self, content_type: str, body: bytes) -> bytes | None:
        """The answer's body, or None: the general path answers."""
        if self.node.project.access is not None or tracing.on() or content_type != JSON:
            return None
        request = _plain(body)
        if request is None:
            return None
        query, name, variables = request
        try:
            prepared = self.operations.ready(query, name)
        except Refused:
            return None
        read = None if prepared is None else prepared.key_read
        if prepared is None or read is None:
            return None
        started = time.perf_counter()
        result = read.at_once(self.node, variables)
        if result is None:
            return None
        self.node.metrics.read_at_once(prepared.name, time.perf_counter() - started)
        limit = self.node.project.settings.max_response_bytes
        return results.encoded(results.response(result), limit)


def _plain(body: bytes) -> tuple[str, str | None, dict[str, Any] | None] | None:
    """(query, operation name, variables) of a body that is one request naming no hash."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(request) is not dict or "extensions" in request or "documentId" in request:
        return None
    query, name, variables = (
        request.get("query"), request.get("operationName"), request.get("variables")
    )  # fmt: skip
    if type(query) is not str or not (name is None or type(name) is str):
        return None
    if not (variables is None or type(variables) is dict):
        return None
    return query, name, variables
