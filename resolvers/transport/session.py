"""A client's requests through the front end, whatever carries them: who is asking, each
operation resolved (text or persisted hash), prepared and run, its outcome counted in the
node's metrics and its mistakes logged in one line (resolvers/execution/client_errors.py).
The HTTP endpoint and the WebSocket connection adapt it, as strawberry's views adapt one
base view; live evaluation runs the operations a session prepared."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from strawberry.types import ExecutionResult

from contracts.access import ANONYMOUS, Principal
from gateway.auth import Unauthenticated
from gateway.node import GatewayNode
from resolvers.execution import client_errors, results
from resolvers.execution.operations import Operations, Prepared, Refused
from resolvers.execution.persisted import Source
from resolvers.schema.context import Context

Check = Callable[[Source], None]  # a transport's own refusal of a resolved operation


class Session:
    def __init__(
        self,
        node: GatewayNode,
        operations: Operations,
        via: str,
        client: tuple[str, int] | None,
        authorization: str | None,
    ) -> None:
        self.node = node
        self.operations = operations
        self.via = via  # "http" or "websocket", as log lines say
        self.client = client
        self.authorization = authorization
        self.principal: Principal = ANONYMOUS
        self.claimed: str | None = None  # the subject of a token that did not verify

    @property
    def who(self) -> client_errors.Who:
        return client_errors.Who.at(self.client, self.principal.subject or self.claimed)

    def authenticate(self, authorization: str | None = None) -> None:
        """Verify the token (this one, when given); Unauthenticated otherwise, for the
        transport to answer and log as it refuses (an HTTP 401, a WebSocket close)."""
        if authorization is not None:
            self.authorization = authorization
        try:
            self.principal = self.node.authenticator.authenticate(self.authorization)
        except Unauthenticated as refused:
            self.claimed = refused.subject
            raise

    def context(self, lone: bool = False) -> Context:
        return Context.create(self.node, self.authorization, self.principal, lone)

    def prepare(
        self,
        query: str | None,
        name: str | None,
        hash: str | None,
        variables: dict[str, Any] | None,
        check: Check | None = None,
    ) -> Prepared:
        """The operation checked and ready to run; Refused, logged and counted, otherwise."""
        started = time.perf_counter()
        source: Source | None = None
        try:
            source = self.operations.resolve(query, name, hash)
            if check is not None:
                check(source)
            return self.operations.prepare(source, variables)
        except Refused as refused:
            self.refused(refused, name if source is None else source.name, started)
            raise

    def refused(self, refused: Refused, name: str | None, started: float | None = None) -> None:
        client_errors.refused(refused.errors, name, self.via, self.who)
        self.count(name, refused.outcome, started)

    async def run(
        self, prepared: Prepared, context: Context, variables: dict[str, Any] | None
    ) -> ExecutionResult:
        started = time.perf_counter()
        result = await self.operations.execute(prepared, context, variables)
        client_errors.failed(result.errors, prepared.name, self.via, self.who)
        self.count(prepared.name, results.outcome(result), started)
        return result

    def count(self, name: str | None, outcome: str, started: float | None = None) -> None:
        seconds = 0.0 if started is None else time.perf_counter() - started
        self.node.metrics.request(name, outcome, seconds)
