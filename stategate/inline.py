"""Known reads answered inside the HTTP server's protocol, with no ASGI on their way.

For each request uvicorn's httptools protocol makes a task that runs the app, which reads
the body and sends the answer as ASGI messages through the app's layers. A one-key read this
node answers from memory at once needs none of that, nor does a peer's hop of a few keys
this node reads from memory: the answer is ready as soon as the body is whole, with no await
(NodeApp.at_once). So the protocol holds a request to /graphql or /internal/query until its
body is whole, asks `at_once`, and writes the answer itself, as uvicorn would have written
it (its default headers first); or, when `at_once` says None, starts the app's task as
uvicorn would have, the body already read. A known read of a key another node serves is
answered as the router's round returns, by a task of the protocol's (cancelled if the client
leaves, waited for by a graceful stop), with no ASGI message either. Both ways answer the
same bytes (tests/test_plans.py).

Only a request the app would be asked at once is held: the first of a connection's
pipeline, kept alive, without Expect: 100-continue (the client waits for the app to read),
whose body fits uvicorn's read buffer (HIGH_WATER_LIMIT: past it reading pauses until the
app reads), on a connection whose client takes what is written to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import ClassVar, Protocol

from starlette.types import Scope
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from stategate.app import AT_ONCE, Answered

ASKED = ("GET", "POST")


class AtOnce(Protocol):
    def at_once(
        self, scope: Scope, body: bytes
    ) -> Answered | Awaitable[Answered | None] | None: ...


class InlineAnswers(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing what `answers.at_once` answers (set by a
    subclass: stategate/server_protocol.py)."""

    answers: ClassVar[AtOnce]
    _heading = False  # within on_headers_complete: a request uvicorn starts at once
    _held: tuple[RequestResponseCycle, ASGI3Application] | None = None
    # an answer under way, cancelled if the client leaves
    _awaited: asyncio.Task[None] | None = None

    def on_headers_complete(self) -> None:
        self._heading = True
        try:
            super().on_headers_complete()
        finally:
            self._heading = False

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        if self._heading and self._holds(cycle):
            self._held = (cycle, app)
        else:
            super()._start_asgi_task(cycle, app)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        held, self._held = self._held, None
        if held is None:
            return
        cycle, app = held
        answered = None
        if cycle.keep_alive and not self.flow.write_paused:  # as when it was held
            answered = self.answers.at_once(cycle.scope, bytes(cycle.body))  # type: ignore[arg-type]
        if answered is None:
            super()._start_asgi_task(cycle, app)
        elif isinstance(answered, Answered):
            self._write(cycle, answered)
        else:
            self._awaited = self.loop.create_task(self._later(cycle, app, answered))
            self._awaited.add_done_callback(self.tasks.discard)
            self.tasks.add(self._awaited)  # a graceful stop waits for it, as for the app's

    async def _later(
        self,
        cycle: RequestResponseCycle,
        app: ASGI3Application,
        answer: Awaitable[Answered | None],
    ) -> None:
        """Write the answer once it comes; the app answers when it says None or fails."""
        try:
            answered = await answer
        except Exception:  # noqa: BLE001 - a bug: the app answers, and words it
            answered = None
        if cycle.disconnected:
            return
        if answered is None:
            super()._start_asgi_task(cycle, app)
        else:
            self._write(cycle, answered)

    def connection_lost(self, exc: Exception | None) -> None:
        self._held = None
        if self._awaited is not None and not self._awaited.done():
            self._awaited.cancel()
        super().connection_lost(exc)

    def _holds(self, cycle: RequestResponseCycle) -> bool:
        scope = cycle.scope
        if scope["path"] not in AT_ONCE or scope["method"] not in ASKED:
            return False
        if not cycle.keep_alive or cycle.waiting_for_100_continue or self.flow.write_paused:
            return False
        length = b"0"
        for name, value in self.headers:
            if name == b"transfer-encoding":
                return False
            if name == b"content-length":
                length = value
        return length.isdigit() and int(length) <= HIGH_WATER_LIMIT

    def _write(self, cycle: RequestResponseCycle, answered: Answered) -> None:
        content = [STATUS_LINE[200]]
        for name, value in (*cycle.default_headers, *answered.headers):
            content.extend((name, b": ", value, b"\r\n"))
        if not cycle.keep_alive:  # a graceful stop began while the answer was under way
            content.append(b"connection: close\r\n")
        content.extend((b"\r\n", answered.body))
        self.transport.write(b"".join(content))
        cycle.response_started = cycle.response_complete = True
        if not cycle.keep_alive:
            self.transport.close()
        self.on_response_complete()
