"""Known reads: the shortest way through a node, from a request's bytes to its answer's.

One request (POST or GET; a document's text, or the hash of a persisted one, as
requests.py reads it) whose operation this node prepared before, and which reads one key
and nothing else (a KeyLookup of one field), on a node without [auth] and without tracing:
when the node reads the key from its own memory at once (it is the first replica of the
key's partition: no hop), the answer is read, completed and encoded here, with no session,
context, batch, task or deadline made for it, as no await comes between the request read
and the answer. Anything else returns None before anything was counted or read, and the
general path (endpoint.py) answers. Both give the same bytes (tests/test_plans.py).
"""

from __future__ import annotations

import time

from contracts import tracing
from gateway.node import GatewayNode
from resolvers.execution import results
from resolvers.execution.operations import Operations, Refused
from resolvers.transport.requests import GraphQLRequest


class KnownReads:
    def __init__(self, node: GatewayNode, operations: Operations) -> None:
        self.node = node
        self.operations = operations

    def answer(self, request: GraphQLRequest) -> bytes | None:
        """The answer's body, or None: the general path answers."""
        if self.node.project.access is not None or tracing.on():
            return None
        try:
            prepared = self.operations.ready(request.query, request.operation_name, request.hash)
        except Refused:
            return None
        read = prepared and prepared.key_read
        if not (prepared and read):
            return None
        started = time.perf_counter()
        result = read.at_once(self.node, request.variables)
        if result is None:
            return None
        self.node.metrics.read_at_once(prepared.name, time.perf_counter() - started)
        limit = self.node.project.settings.max_response_bytes
        return results.encoded(results.response(result), limit)
