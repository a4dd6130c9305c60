"""Sub-queries that several requests send one peer in the same turn of the event loop go in
one internal request, its answers split back: under load the requests that hop at once share
one HTTP exchange, on both nodes, instead of one each. Nothing waits for company: the call
leaves at the next turn of the loop (LEAVES_AFTER_TURNS), with what joined it by then; its
task writes the request in that turn, when a kept connection is idle.

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
LEAVES_AFTER_TURNS = 1  # a call opened in a turn of the loop leaves in the next


@dataclass(eq=False)
class _Call:
    subqueries: list[SubQuery] = field(default_factory=list)
    callers: int = 0
    keys: int = 0
    answers: asyncio.Task[list[Answer]] = field(init=False)  # the call, leaving


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
            call = self._open[opened] = _Call()
            call.answers = asyncio.get_running_loop().create_task(self._leave(opened, call))
            call.answers.add_done_callback(_retrieved)
        return call

    async def _leave(self, opened: tuple[str, str | None], call: _Call) -> list[Answer]:
        """The call, sent in the turn after it opened (its task's first step), with every
        caller of that turn in it."""
        if self._open.get(opened) is call:
            del self._open[opened]
        subqueries = call.subqueries
        if call.callers > 1:
            subqueries = [dataclasses.replace(q, id=i) for i, q in enumerate(subqueries)]
        return await self._send(opened[0], subqueries, opened[1])


def _retrieved(answers: asyncio.Task[list[Answer]]) -> None:
    """Callers all gone (their deadlines): what the call raised is nobody's to log."""
    if not answers.cancelled():
        answers.exception()
