"""The keeper's channel (gateway/workers/channel.py): every message reads back as written,
what is not a message is a ChannelError, asks meet their answers over a real socket pair;
and a node's metrics sum its workers' (gateway/cluster/metrics.py: summed)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from contracts.manifest import Built
from contracts.placement import Assignment
from contracts.topology import Topology
from gateway.cluster.metrics import summed
from gateway.storage.catalog.layers import LevelImage, LocalLayer
from gateway.workers.channel import (
    Ask,
    AskReply,
    Beat,
    ChainNews,
    ChannelError,
    ClusterNews,
    DeliveryNews,
    Link,
    Message,
    Ready,
    Serving,
    decode,
    encode,
)

paths = st.text(min_size=1).map(lambda name: Path("/data") / name.replace("\0", ""))
layers = st.lists(
    st.builds(
        LocalLayer,
        st.integers(1, 10**9),
        st.sampled_from(["base", "delta"]),
        paths,
        st.one_of(st.none(), st.integers(0, 2**62)),
    ),
    max_size=4,
).map(tuple)
levels = st.lists(st.builds(LevelImage, paths, st.integers(1, 10**6)), max_size=3).map(tuple)
messages = st.one_of(
    st.builds(
        ChainNews, st.integers(0, 10**4), st.one_of(st.none(), layers), st.one_of(st.none(), levels)
    ),
    st.builds(
        DeliveryNews,
        st.dictionaries(st.text(), st.dictionaries(st.integers(0, 99), st.integers(0, 2**62))),
        st.dictionaries(st.integers(0, 99), st.text()),
        st.dictionaries(st.text(), st.integers(0, 2**62)),
        st.one_of(
            st.none(),
            st.builds(
                Built,
                st.integers(1, 10**4),
                st.dictionaries(st.text(), st.text()),
                st.dictionaries(st.text(), st.text()),
            ),
        ),
    ),
    st.just(Ready()),
    st.just(Serving()),
    st.just(Beat()),
    st.builds(Ask, st.integers(1, 10**9), st.sampled_from(["sync", "metrics", "workers"])),
    st.builds(AskReply, st.integers(1, 10**9), st.one_of(st.text(), st.none())),
)


@given(messages)
def test_messages_read_back_as_written(message: Message) -> None:
    line = encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    back = decode(line)
    assert back == message
    if isinstance(message, ChainNews) and message.layers is not None:  # compare=False fields too
        assert isinstance(back, ChainNews) and back.layers is not None
        appended = [x.newest_append_ms for x in back.layers]
        assert appended == [x.newest_append_ms for x in message.layers]


def test_a_cluster_reads_back_with_its_assignment_and_fencing() -> None:
    assignment = Assignment(7, 2, (("a", "b"), ("b",)), ((), ("a",)), (("a", "b"), ("b", "a")))
    topology = Topology(assignment, {"a": "127.0.0.1:1", "b": "127.0.0.1:2"}, frozenset({"b"}))
    message = ClusterNews(topology, {"kind": "elastic", "leader": "a"}, connected=False)
    assert decode(encode(message)) == message


@pytest.mark.parametrize(
    "line",
    [b"", b"{", b"[]", b'{"what": 1}', b'{"ask": 1, "kind": "reboot"}',
     b'{"chain": 1, "layers": [[1, "side", "/x", null]]}', b'{"chain": "x", "layers": null}'],
)  # fmt: skip
def test_what_is_not_a_message_is_a_channel_error(line: bytes) -> None:
    with pytest.raises(ChannelError):
        decode(line)


def test_asks_meet_their_answers_and_messages_arrive_in_order() -> None:
    async def both_ends() -> tuple[list[Message], Any, Any]:
        left, right = socket.socketpair()
        heard: list[Message] = []

        async def keep(message: Message) -> None:
            heard.append(message)

        async def answer(ask: Ask) -> Any:
            return {"kind": ask.kind}

        ends = [await asyncio.open_unix_connection(sock=s) for s in (left, right)]
        keeper = Link(*ends[0], keep, answer)
        follower = Link(*ends[1], keep, answer)
        tasks = [asyncio.create_task(link.run()) for link in (keeper, follower)]
        keeper.send(ChainNews(3, None))
        keeper.send(Ready())
        asked = await follower.ask("sync", 5)
        metrics = await keeper.ask("metrics", 5)
        keeper.close()
        await asyncio.gather(*tasks)
        with pytest.raises(ChannelError):  # the link closed: no answer will come
            await follower.ask("sync", 5)
        return heard, asked, metrics

    heard, asked, metrics = asyncio.run(both_ends())
    assert heard == [ChainNews(3, None), Ready()]
    assert asked == {"kind": "sync"} and metrics == {"kind": "metrics"}


def exposition(requests: dict[str, int], seconds: list[float]) -> str:
    registry = CollectorRegistry()
    counter = Counter("requests", "requests", ["operation"], registry=registry)
    latency = Histogram("latency_seconds", "latency", buckets=(0.1, 1), registry=registry)
    for operation, count in requests.items():
        counter.labels(operation).inc(count)
    for value in seconds:
        latency.observe(value)
    return generate_latest(registry).decode()


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def test_metrics_of_workers_sum_sample_by_sample() -> None:
    one = exposition({"a": 2, "b": 1}, [0.05, 2])
    two = exposition({"a": 3, "c": 4}, [0.5])
    found = samples(summed([one, two]))
    assert found[("requests_total", (("operation", "a"),))] == 5
    assert found[("requests_total", (("operation", "b"),))] == 1
    assert found[("requests_total", (("operation", "c"),))] == 4
    assert found[("latency_seconds_bucket", (("le", "0.1"),))] == 1
    assert found[("latency_seconds_bucket", (("le", "1.0"),))] == 2
    assert found[("latency_seconds_bucket", (("le", "+Inf"),))] == 3
    assert found[("latency_seconds_count", ())] == 3
    assert not [name for name, _ in found if name.endswith("_created")]
    assert samples(summed([one])) == {
        k: v for k, v in samples(one.encode()).items() if not k[0].endswith("_created")
    }
