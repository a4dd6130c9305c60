"""Known reads: the shortest way through a node, from a request's bytes to its answer's.

One request (POST or GET; a document's text, or the hash of a persisted one, as
requests.py reads it) whose operation this node prepared before, and which reads one key
and nothing else (a KeyLookup of one field whose arguments bind plainly: a key's record, or
a versioned store's key as of a time), on a node without
[auth] and without tracing, is a known read (`KnownReads.read`). No session, context,
batch or Starlette response is made for it:

- when the node reads the key from its own memory at once (it is the first replica of the
  key's partition), `at_once` reads, completes and encodes the answer with no await between
  the request read and the answer, so no task, deadline or disconnect watch either;
- else `routed` asks the router (a hop to the replica that serves the key, failing over as
  a batch would), within request_timeout_s; the endpoint cancels it if the client leaves.

Anything else returns None before anything was counted or read, and the general path
(endpoint.py) answers; so does a routed read whose answer holds a value the schema refuses.
Both paths give the same bytes (tests/test_plans.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from strawberry.types import ExecutionResult

from contracts import tracing
from contracts.positions import encode_token
from gateway.node import GatewayNode
from gateway.service import KeyRead
from resolvers.execution import client_errors, results
from resolvers.execution.key_lookup import KeyLookup
from resolvers.execution.operations import Operations, Refused
from resolvers.transport.requests import GraphQLRequest


@dataclass(frozen=True)
class KnownRead:
    name: str | None  # the operation's, as metrics and logs name it
    lookup: KeyLookup
    read: KeyRead


class KnownReads:
    def __init__(self, node: GatewayNode, operations: Operations) -> None:
        self.node = node
        self.operations = operations

    def read(self, request: GraphQLRequest) -> KnownRead | None:
        """The request as a known read, or None: the general path answers."""
        if self.node.project.access is not None or tracing.on():
            return None
        try:
            prepared = self.operations.ready(request.query, request.operation_name, request.hash)
        except Refused:
            return None
        read = prepared and prepared.key_read
        if not (prepared and read):
            return None
        one = read.lone(request.variables)
        return None if one is None else KnownRead(prepared.name, read, one)

    def at_once(self, known: KnownRead) -> bytes | None:
        """The answer's body when this node reads the key from memory at once, else None
        (nothing was counted or read: `routed` answers)."""
        started = time.perf_counter()
        result = known.lookup.at_once(self.node, known.read)
        if result is None:
            return None
        body = self._encoded(result)
        self.node.metrics.read_at_once(known.name, time.perf_counter() - started)
        return body

    async def routed(
        self, known: KnownRead, who: client_errors.Who, authorization: str | None
    ) -> bytes | None:
        """The answer's body through the router (the peers asked with the request's
        authorization, as a batch asks them), or a DEADLINE_EXCEEDED one past
        request_timeout_s; None when the general path must word a value of it."""
        started = time.perf_counter()
        deadline = self.node.project.settings.request_timeout_s
        try:
            async with asyncio.timeout(deadline):
                result = await known.lookup.routed(self.node, known.read, authorization)
        except TimeoutError:
            nothing_read = results.extensions(encode_token({}), [])
            result = results.past_deadline(deadline, nothing_read)
        if result is None:
            return None
        client_errors.failed(result.errors, known.name, "http", who)
        outcome = results.outcome(result)
        self.node.metrics.read_routed(known.name, outcome, time.perf_counter() - started)
        return self._encoded(result)

    def _encoded(self, result: ExecutionResult) -> bytes:
        limit = self.node.project.settings.max_response_bytes
        return results.encoded(results.response(result), limit)
