"""A GraphQL request whose client leaves is cancelled, its internal calls with it; one
answered sooner than WATCH_AFTER_S never starts the watch (most requests: no task spent)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from resolvers.transport.endpoint import _LEFT, WATCH_AFTER_S, _unless_disconnected


def _client(leaves_after_s: float | None) -> Any:
    """An ASGI receive: the body, then a disconnect after `leaves_after_s` (None: never)."""
    messages = 0

    async def receive() -> dict[str, Any]:
        nonlocal messages
        messages += 1
        if messages == 1:
            return {"type": "http.request", "body": b"", "more_body": False}
        if leaves_after_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(leaves_after_s or 0)
        return {"type": "http.disconnect"}

    return receive


def test_a_client_that_leaves_cancels_the_work() -> None:
    stopped: list[str] = []

    async def work() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            stopped.append("cancelled")
            raise
        return "answered"

    async def request() -> tuple[object, float, bool]:
        receive = _client(leaves_after_s=0.2)
        await receive()  # the body, as the endpoint reads it first
        started = time.perf_counter()
        answered = await _unless_disconnected(work(), receive)
        task = asyncio.current_task()
        assert task is not None
        return answered, time.perf_counter() - started, task.cancelling() == 0

    answered, seconds, uncancelled = asyncio.run(request())
    assert answered is _LEFT and stopped == ["cancelled"]
    assert 0.2 <= seconds < 2, seconds
    assert uncancelled  # the request's task goes on to answer 499 in the access log


def test_a_quick_answer_starts_no_watch_and_a_slow_one_stays() -> None:
    async def answer(after_s: float) -> str:
        await asyncio.sleep(after_s)
        return "answered"

    async def request(after_s: float) -> tuple[str | None, int]:
        receive = _client(leaves_after_s=None)
        await receive()
        answered = await _unless_disconnected(answer(after_s), receive)
        await asyncio.sleep(0)
        return answered, len(asyncio.all_tasks())

    assert asyncio.run(request(0)) == ("answered", 1)  # the request's task alone
    assert asyncio.run(request(WATCH_AFTER_S * 3)) == ("answered", 1)  # the watch ended


def test_the_request_timeout_inside_still_words_its_own_error() -> None:
    async def work() -> str:
        try:
            async with asyncio.timeout(0.1):
                await asyncio.sleep(30)
        except TimeoutError:
            return "deadline"
        return "answered"

    async def request() -> str | None:
        receive = _client(leaves_after_s=None)
        await receive()
        return await _unless_disconnected(work(), receive)

    assert asyncio.run(request()) == "deadline"
