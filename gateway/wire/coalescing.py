"""Sub-queries that several requests send one peer in the same turn of the event loop go in
one internal request, its answers split back: under load the requests that hop at once share
one HTTP exchange, on both nodes, instead of one each. Nothing waits for company: the call
leaves at the next turn of the loop, with what joined it by then.

Only small calls join (at most SLICE keys in all: encoded and decoded inline, never on the
bulk thread), and those of one authorization (the peer reads with it). A caller cancelled
(its deadline) leaves the shared call to the others. The sub-queries of a call shared by
several callers are numbered anew, their answers given back their callers' ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from gateway.model.queries import Answer, SubQuery, keys_of
from gateway.runtime.lanes import SLICE

Send = Callable[[str, list[SubQuery], str | None], Awaitable[list[Answer]]]


@dataclass(eq=False)
class _Call:
    answers: asyncio.Future[list[Answer]]
    subqueries: list[SubQuery] = field(default_factory=list)
    callers: int = 0
    keys: int = 0


class Coalescing:
    def __init__(self, send: Send) -> None:
        self._send = send
        self._open: dict[tuple[str, str | None], _Call] = {}

    async def query(
        self, url: str, subqueries: list[SubQuery], authorization: str | None
    ) -> list[Answer]:
        keys = keys_of(subqueries)
        if keys > SLICE:
            return await self._send(url, subqueries, authorization)
        call = self._joined(url, authorization, keys)
        start = len(call.subqueries)
        call.subqueries += subqueries
        call.callers += 1
        call.keys += keys
        answers = await asyncio.shield(call.answers)
        if call.callers == 1:
            return answers
        end = start + len(subqueries)
        return [
            dataclasses.replace(a, id=subqueries[a.id - start].id)
            for a in answers
            if start <= a.id < end
        ]

    def _joined(self, url: str, authorization: str | None, keys: int) -> _Call:
        """The call to `url` leaving at the next turn that these keys fit in; a new one."""
        opened = (url, authorization)
        call = self._open.get(opened)
        if call is None or call.keys + keys > SLICE:
            loop = asyncio.get_running_loop()
            call = self._open[opened] = _Call(loop.create_future())
            call.answers.add_done_callback(_retrieved)
            loop.call_soon(self._leave, opened, call)
        return call

    def _leave(self, opened: tuple[str, str | None], call: _Call) -> None:
        if self._open.get(opened) is call:
            del self._open[opened]
        subqueries = call.subqueries
        if call.callers > 1:
            subqueries = [dataclasses.replace(q, id=i) for i, q in enumerate(subqueries)]
        task = asyncio.ensure_future(self._send(opened[0], subqueries, opened[1]))
        task.add_done_callback(lambda done: _settle(call.answers, done))


def _settle(answers: asyncio.Future[list[Answer]], done: asyncio.Future[list[Answer]]) -> None:
    if answers.done():
        return
    if done.cancelled():
        answers.cancel()
    elif (exc := done.exception()) is not None:
        answers.set_exception(exc)
    else:
        answers.set_result(done.result())


def _retrieved(answers: asyncio.Future[list[Answer]]) -> None:
    """Callers all gone (their deadlines): what the call raised is nobody's to log."""
    if not answers.cancelled():
        answers.exception()
