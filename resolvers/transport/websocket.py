"""GraphQL over WebSocket on /graphql: the graphql-transport-ws protocol, the one graphql-ws
clients speak.

The client sends connection_init (its payload may carry {"Authorization": "Bearer ..."},
else the handshake's Authorization header counts) and gets connection_ack (with [auth], only
when the token verifies: else the socket is closed with 4403); then any number of subscribe
messages. A subscription gets `next` messages until the client completes it
(resolvers/transport/live.py decides when); a query gets one `next`, then `complete`. ping
gets pong.

A subscribe payload is a GraphQL request as over HTTP, persisted-query hash included
(`extensions.persistedQuery` or `documentId`: resolvers/execution/persisted.py). An
operation that cannot run gets an `error` message with coded GraphQL errors: a document that
does not parse or validate, variables that do not fit, a limit (TOO_MANY_SUBSCRIPTIONS), an
unknown hash (PERSISTED_QUERY_NOT_FOUND), an operation the allow-list refuses
(OPERATION_NOT_ALLOWED). A client that breaks the protocol is closed with the protocol's
codes: 4400 a message that is not the protocol, 4401 subscribe before connection_ack, 4406
no graphql-transport-ws subprotocol, 4408 no connection_init in time, 4409 an id already in
use, 4429 a second connection_init; 4403 a connection_init without a valid token, with
[auth], and a connection whose token expires (exp, with the leeway): its client reconnects
with a fresh one. A handshake from a page of another origin never gets here
(stategate/origins.py refuses it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

import orjson
from graphql import OperationType
from starlette.websockets import WebSocket, WebSocketDisconnect

from contracts.errors import GatewayError
from gateway.auth import Unauthenticated
from resolvers.execution import client_errors, results
from resolvers.execution.operations import Prepared, Refused
from resolvers.transport.live import Hub, Operation, Subscriber
from resolvers.transport.requests import TransportError, persisted_hash
from resolvers.transport.session import Session

log = logging.getLogger(__name__)
PROTOCOL = "graphql-transport-ws"
MAX_REASON = 120  # a close frame's reason is at most 123 bytes


class ProtocolViolation(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


async def serve(websocket: WebSocket, hub: Hub) -> None:
    if PROTOCOL not in websocket.scope.get("subprotocols", []):
        client_errors.transport("4406", "Subprotocol not acceptable", "websocket")
        await websocket.accept()  # as graphql-ws does: a close code needs an open socket
        await websocket.close(4406, "Subprotocol not acceptable")
        return
    await websocket.accept(subprotocol=PROTOCOL)
    await Connection(websocket, hub).serve()


async def _first(receiving: asyncio.Future[Any], event: asyncio.Event) -> None:
    """Return once `receiving` is done or `event` set, whichever comes first."""
    waiting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({receiving, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()


class Connection:
    def __init__(self, websocket: WebSocket, hub: Hub) -> None:
        self.websocket = websocket
        self.hub = hub
        self.settings = hub.node.project.settings
        self.session = Session(  # the token is verified at connection_init
            hub.node,
            hub.operations,
            "websocket",
            websocket.scope.get("client"),
            websocket.headers.get("authorization"),
        )
        self.acknowledged = False
        self._authentication = hub.node.authentication  # the node's [auth] its token passed
        self.operations: dict[str, tuple[Operation | None, Subscriber]] = {}
        self._ready: deque[Subscriber] = deque()
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def serve(self) -> None:
        writer = asyncio.create_task(self._write())
        try:
            await self._converse()
        except ProtocolViolation as violation:
            client_errors.transport(
                str(violation.code), violation.reason, "websocket", self.session.who
            )
            with contextlib.suppress(Exception):
                await self.websocket.close(violation.code, violation.reason)
        except WebSocketDisconnect:
            pass
        finally:
            writer.cancel()
            for task in self._tasks:
                task.cancel()
            for id in list(self.operations):
                self._end(id)

    async def _converse(self) -> None:
        timeout = self.settings.connection_init_timeout_s
        try:
            async with asyncio.timeout(timeout):
                while not self.acknowledged:
                    await self._handle(await self._receive())
        except TimeoutError:
            raise ProtocolViolation(4408, "Connection initialisation timeout") from None
        lifetime = asyncio.timeout(self.hub.node.authenticator.lifetime(self.session.principal))
        try:
            async with lifetime:
                while True:
                    await self._handle(await self._receive_verified())
        except TimeoutError:
            if not lifetime.expired():
                raise
            raise ProtocolViolation(4403, "Forbidden: the bearer token has expired") from None

    async def _receive_verified(self) -> dict[str, Any]:
        """The next message, its token verified as the node verifies tokens now: each time
        the node reads [auth] again (`GatewayNode.take`), meanwhile or since the last
        message, the token is verified again (`_verify_again`) before anything else, so
        that no socket reads on as whom a token no longer makes it."""
        node = self.hub.node
        receiving = asyncio.ensure_future(self._receive())
        try:
            while True:
                if self._authentication != node.authentication:
                    self._verify_again()
                if receiving.done():
                    return receiving.result()
                await _first(receiving, node.authentication_read)
        finally:
            receiving.cancel()

    def _verify_again(self) -> None:
        """The token verified by the node's [auth] as it is now: ProtocolViolation 4403 when
        it no longer verifies, or makes it someone else (other roles: its subscriptions were
        evaluated as the principal it was); the client connects again."""
        self._authentication = self.hub.node.authentication
        before = self.session.principal
        try:
            self.session.authenticate()
        except Unauthenticated as refused:
            reason = f"Forbidden: [auth] changed: {refused.message}"
            raise ProtocolViolation(4403, reason[:MAX_REASON]) from None
        if self.session.principal != before:
            raise ProtocolViolation(4403, "Forbidden: [auth] changed who the token is")

    async def _receive(self) -> dict[str, Any]:
        message = await self.websocket.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        raw = message.get("text")
        if raw is None:
            raw = message.get("bytes") or b""
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ProtocolViolation(4400, "Invalid message received: not JSON") from None
        if not isinstance(parsed, dict) or not isinstance(parsed.get("type"), str):
            raise ProtocolViolation(4400, "Invalid message received: no type")
        return parsed

    async def _handle(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "connection_init":
            self._initialise(message.get("payload"))
            await self._send({"type": "connection_ack"})
        elif kind == "ping":
            await self._send({"type": "pong"})
        elif kind == "pong":
            pass
        elif kind == "subscribe":
            if not self.acknowledged:
                raise ProtocolViolation(4401, "Unauthorized")
            await self._subscribe(message)
        elif kind == "complete":
            id = message.get("id")
            if isinstance(id, str):
                self._end(id)
        else:
            raise ProtocolViolation(4400, f"Invalid message received: unknown type {kind!r}")

    def _initialise(self, payload: object) -> None:
        if self.acknowledged:
            raise ProtocolViolation(4429, "Too many initialisation requests")
        if payload is not None and not isinstance(payload, dict):
            raise ProtocolViolation(4400, "Invalid message received: payload is not an object")
        given = {str(k).lower(): v for k, v in (payload or {}).items()}.get("authorization")
        self._authentication = self.hub.node.authentication
        try:
            self.session.authenticate(given if isinstance(given, str) else None)
        except Unauthenticated as refused:
            raise ProtocolViolation(4403, f"Forbidden: {refused.message}"[:MAX_REASON]) from None
        self.acknowledged = True

    async def _subscribe(self, message: dict[str, Any]) -> None:
        id, payload = message.get("id"), message.get("payload")
        if not isinstance(id, str) or not id or not isinstance(payload, dict):
            raise ProtocolViolation(4400, "Invalid message received: subscribe needs an id")
        query, variables = payload.get("query"), payload.get("variables")
        name = payload.get("operationName")
        extensions = payload.get("extensions")
        hashed = isinstance(extensions, dict) and extensions.get("persistedQuery") is not None
        persisted = hashed or payload.get("documentId") is not None
        if not (
            (isinstance(query, str) or (query is None and persisted))
            and (variables is None or isinstance(variables, dict))
            and (name is None or isinstance(name, str))
        ):
            raise ProtocolViolation(4400, "Invalid message received: not a GraphQL request")
        if id in self.operations:
            raise ProtocolViolation(4409, f"Subscriber for {id} already exists")
        try:
            prepared = self._prepare(query, name, variables, payload)
            if prepared.kind is OperationType.SUBSCRIPTION:
                self._check_limits(prepared)
        except Refused as refused:
            await self._send({"id": id, "type": "error", "payload": refused.errors})
            return
        subscriber = Subscriber(id, self._became_ready)
        session = self.session
        if prepared.kind is OperationType.SUBSCRIPTION:
            operation = Operation(prepared, variables, session.authorization, session.principal)
            self.operations[id] = (operation, subscriber)
            self._spawn(self._join(operation, subscriber))
        else:
            self.operations[id] = (None, subscriber)
            self._spawn(self._answer_once(id, prepared, variables))

    def _prepare(
        self,
        query: str | None,
        name: str | None,
        variables: dict[str, Any] | None,
        payload: dict[str, Any],
    ) -> Prepared:
        """As over HTTP: the query, or the persisted document its hash names."""
        try:
            hash = persisted_hash(payload.get("extensions"), payload.get("documentId"), query)
            if query is None and hash is None:
                raise TransportError(
                    400, "BAD_REQUEST", "the request has no query, nor a persisted one's hash"
                )
        except TransportError as error:
            refused = Refused.one(error.code, error.message)
            self.session.refused(refused, name)
            raise refused from None
        return self.session.prepare(query, name, hash, variables)

    def _check_limits(self, prepared: Prepared) -> None:
        limit = self.settings.max_subscriptions_per_connection
        open_here = sum(1 for operation, _ in self.operations.values() if operation is not None)
        error = self.hub.refusal()
        if open_here >= limit:
            error = GatewayError(
                "TOO_MANY_SUBSCRIPTIONS",
                f"this connection has {limit} subscriptions open already "
                "(max_subscriptions_per_connection)",
            )
        if error is not None:
            refused = Refused([{"message": error.message, "extensions": error.extensions}])
            self.session.refused(refused, prepared.name)
            raise refused

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _join(self, operation: Operation, subscriber: Subscriber) -> None:
        if self.operations.get(subscriber.id, (None, None))[1] is not subscriber:
            return  # completed before it started
        try:
            await self.hub.join(operation, subscriber)
        except Refused as refused:
            self.session.refused(refused, operation.prepared.name)
            self.operations.pop(subscriber.id, None)
            await self._send({"id": subscriber.id, "type": "error", "payload": refused.errors})
            return
        if self.operations.get(subscriber.id, (None, None))[1] is not subscriber:
            self.hub.leave(operation, subscriber)  # completed while it was evaluated

    async def _answer_once(
        self, id: str, prepared: Prepared, variables: dict[str, Any] | None
    ) -> None:
        result = await self.session.run(prepared, self.session.context(prepared.lone), variables)
        if self.operations.pop(id, None) is None:
            return
        body = results.response(result)
        if "data" not in body:  # a request error: refused, as a subscription's is
            await self._send({"id": id, "type": "error", "payload": body["errors"]})
            return
        await self._send({"id": id, "type": "next", "payload": body})
        await self._send({"id": id, "type": "complete"})

    def _end(self, id: str) -> None:
        operation, subscriber = self.operations.pop(id, (None, None))
        if operation is not None and subscriber is not None:
            self.hub.leave(operation, subscriber)

    def _became_ready(self, subscriber: Subscriber) -> None:
        self._ready.append(subscriber)
        self._wake.set()

    async def _write(self) -> None:
        """Send each ready subscriber's pending update, one at a time: while the client
        reads slowly, newer updates replace the pending ones (resolvers/transport/live.py)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._ready:
                subscriber = self._ready.popleft()
                current = self.operations.get(subscriber.id, (None, None))[1]
                if current is subscriber and subscriber.ended is not None:
                    del self.operations[subscriber.id]  # the hub let go of it
                    message = {"id": subscriber.id, "type": "error", "payload": subscriber.ended}
                    await self._send(message)
                    continue
                payload = subscriber.take()
                if payload is None or current is not subscriber:
                    continue
                head = b'{"id":' + orjson.dumps(subscriber.id) + b',"type":"next","payload":'
                await self._send_text(head + payload + b"}")

    async def _send(self, message: dict[str, Any]) -> None:
        await self._send_text(orjson.dumps(message))

    async def _send_text(self, text: bytes) -> None:
        """Send one message; on a connection already gone, nothing (the receiving side
        ends the conversation)."""
        with contextlib.suppress(OSError, RuntimeError, WebSocketDisconnect):
            await self.websocket.send({"type": "websocket.send", "text": text.decode()})
