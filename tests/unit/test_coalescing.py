"""Sub-queries several requests send one peer in the same turn of the event loop share one
internal request (gateway/wire/coalescing.py): each caller gets its own answers back, with
its own ids; a call is sent in the turn after it was made; a failure is every caller's; a
caller that leaves (its deadline) leaves the call to the others; large calls, and calls of
another authorization or peer, go alone."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from gateway.model.queries import Answer, Get, SubQuery
from gateway.runtime.lanes import SLICE
from gateway.wire.coalescing import LEAVES_AFTER_TURNS, Coalescing
from gateway.wire.peer_errors import PeerRefused

Sent = list[tuple[str, list[SubQuery], str | None]]


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """A test of coroutines, run in an event loop of its own."""

    @functools.wraps(test)
    def sync() -> None:
        asyncio.run(test())

    return sync


def subqueries(*keys: tuple[str, ...]) -> list[SubQuery]:
    """One sub-query a key tuple, numbered from 0 as a request's batch numbers them."""
    return [SubQuery(i, i, "s", Get(k)) for i, k in enumerate(keys)]


def peer(sent: Sent, fail: Exception | None = None) -> Coalescing:
    """A peer that answers each sub-query with its keys as its rows, answers in reverse
    order (nothing says they come in order), after a turn of the loop."""

    async def send(url: str, asked: list[SubQuery], authorization: str | None) -> list[Answer]:
        sent.append((url, asked, authorization))
        await asyncio.sleep(0)
        if fail is not None:
            raise fail
        return [Answer(q.id, "n2", rows=[list(q.query.keys)]) for q in reversed(asked)]

    return Coalescing(send)


def rows(answers: list[Answer]) -> dict[int, list[list[str]] | None]:
    return {a.id: a.rows for a in answers}


@run
async def test_callers_of_one_turn_share_one_call_and_get_their_own_answers() -> None:
    sent: Sent = []
    coalescing = peer(sent)
    asked = [subqueries(("a",), ("b",)), subqueries(("c",)), subqueries(("d", "e"))]
    got = await asyncio.gather(*(coalescing.query("u", q, None) for q in asked))
    assert len(sent) == 1
    assert [q.id for q in sent[0][1]] == [0, 1, 2, 3]  # numbered anew: no id twice
    assert [rows(g) for g in got] == [
        {0: [["a"]], 1: [["b"]]},
        {0: [["c"]]},
        {0: [["d", "e"]]},
    ]
    alone = await coalescing.query("u", subqueries(("f",)), None)  # a later turn: a call
    assert len(sent) == 2 and rows(alone) == {0: [["f"]]}


@run
async def test_a_call_is_sent_in_the_turn_after_it_was_made() -> None:
    """As routing counts on: its own share of a round starts once the peers' calls left."""
    sent: Sent = []
    coalescing = peer(sent)
    call = asyncio.ensure_future(coalescing.query("u", subqueries(("a",)), None))
    await asyncio.sleep(0)  # the call was made
    for _ in range(LEAVES_AFTER_TURNS):
        assert sent == []
        await asyncio.sleep(0)
    assert len(sent) == 1
    assert rows(await call) == {0: [["a"]]}


@run
async def test_another_peer_authorization_or_a_large_call_goes_alone() -> None:
    sent: Sent = []
    coalescing = peer(sent)
    large = subqueries(*((str(k),) for k in range(SLICE + 1)))  # sub-queries of a key each
    await asyncio.gather(
        coalescing.query("u", subqueries(("a",)), None),
        coalescing.query("u", subqueries(("b",)), "Bearer x"),
        coalescing.query("v", subqueries(("c",)), None),
        coalescing.query("u", large, None),
    )
    assert sorted((url, auth or "", len(q)) for url, q, auth in sent) == [
        ("u", "", 1), ("u", "", SLICE + 1), ("u", "Bearer x", 1), ("v", "", 1),
    ]  # fmt: skip


@run
async def test_keys_past_a_slice_start_another_call() -> None:
    sent: Sent = []
    coalescing = peer(sent)
    half = subqueries(tuple(str(k) for k in range(SLICE // 2 + 1)))
    got = await asyncio.gather(*(coalescing.query("u", half, None) for _ in range(3)))
    assert [len(q) for _, q, _ in sent] == [1, 1, 1]
    assert all(len(g) == 1 for g in got)


@run
async def test_a_failed_call_fails_every_caller() -> None:
    sent: Sent = []
    coalescing = peer(sent, PeerRefused(503))
    outcomes = await asyncio.gather(
        coalescing.query("u", subqueries(("a",)), None),
        coalescing.query("u", subqueries(("b",)), None),
        return_exceptions=True,
    )
    assert len(sent) == 1 and all(isinstance(o, PeerRefused) for o in outcomes)


@run
async def test_a_caller_that_leaves_leaves_the_call_to_the_others() -> None:
    sent: Sent = []
    coalescing = peer(sent)
    leaving = asyncio.ensure_future(coalescing.query("u", subqueries(("a",)), None))
    staying = asyncio.ensure_future(coalescing.query("u", subqueries(("b",)), None))
    await asyncio.sleep(0)  # both joined
    leaving.cancel()
    assert rows(await staying) == {0: [["b"]]}
    with pytest.raises(asyncio.CancelledError):
        await leaving
    assert len(sent) == 1
