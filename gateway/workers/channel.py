"""The local channel between a node's keeper and its followers: typed messages, one JSON
object a line, over a Unix socket in the abstract namespace (nothing on disk to clean up;
scoped to the node's network namespace, which its workers share).

The keeper tells: each chain it serves (`ChainNews`: its layer files and the images of its
levels; None once handed over), the topology and what its coordinator says
(`ClusterNews`), the snapshot store's log ends, its sync errors and the tables its chains
hold (`DeliveryNews`, before the chains), `Ready` once a follower has heard the whole
state, and the answers to a follower's asks (`AskReply`). A follower asks (`Ask`): a sync
(the pipeline's notification landed on it), the node's metrics (a scrape did) or its
workers serving (a /ready did); it tells `Serving` once it serves (it listens next), and
it beats (`Beat`) every BEAT_S, so that its keeper knows its event loop runs
(gateway/workers/keeper.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from contracts.manifest import Built, parse_built
from contracts.placement import Assignment
from contracts.snapshot_file import Kind
from contracts.topology import Topology
from gateway.storage.catalog.layers import LevelImage, LocalLayer

log = logging.getLogger(__name__)
AskKind = Literal["sync", "metrics", "workers"]
LINE_LIMIT = 64 << 20  # the longest message: a node's metrics, or a chain of many layers
BEAT_S = 0.5


class ChannelError(Exception):
    """A line that is not a message of this channel."""


def address(node_id: str, keeper_pid: int) -> str:
    """The channel of a node's keeper process (abstract: a leading NUL)."""
    return f"\0stategate-{node_id}-{keeper_pid}"


@dataclass(frozen=True)
class ChainNews:
    partition: int  # a chain (contracts/chains.py)
    layers: tuple[LocalLayer, ...] | None  # None: no longer served
    # its deltas as the keeper's levels; None: a level has no image, the deltas are read
    levels: tuple[LevelImage, ...] | None = None


@dataclass(frozen=True)
class ClusterNews:
    topology: Topology
    described: dict[str, Any]  # the coordinator's own description
    connected: bool


@dataclass(frozen=True)
class DeliveryNews:
    log_end: dict[str, dict[int, int]]  # topic -> partition -> end, as last published
    errors: dict[int, str]  # chain -> why its newest version is not served
    store_rows: dict[str, int]  # store -> its rows in the cluster, as published (Manifest)
    built: Built | None  # the chains' tables, as the manifest names them


@dataclass(frozen=True)
class Ready:
    pass


@dataclass(frozen=True)
class Serving:
    pass


@dataclass(frozen=True)
class Beat:
    pass


@dataclass(frozen=True)
class Ask:
    id: int
    kind: AskKind


@dataclass(frozen=True)
class AskReply:
    id: int
    # sync: chain -> version installed; metrics: the exposition's text; workers: Workers
    body: Any


Message = ChainNews | ClusterNews | DeliveryNews | Ready | Serving | Beat | Ask | AskReply


def encode(message: Message) -> bytes:
    return orjson.dumps(_body(message), option=orjson.OPT_NON_STR_KEYS) + b"\n"


def decode(line: bytes) -> Message:
    try:
        body = orjson.loads(line)
        return _message(body)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ChannelError(f"not a channel message: {line[:200]!r}: {exc}") from exc


def _body(message: Message) -> dict[str, Any]:
    match message:
        case ChainNews(partition, layers, levels):
            found = None if layers is None else [_layer(x) for x in layers]
            images = None if levels is None else [[str(x.path), x.span] for x in levels]
            return {"chain": partition, "layers": found, "levels": images}
        case ClusterNews(topology, described, connected):
            return {
                "cluster": orjson.loads(topology.assignment.to_json()),
                "addresses": dict(topology.addresses),
                "fenced": sorted(topology.fenced),
                "scheme": topology.scheme,
                "described": described,
                "connected": connected,
            }
        case DeliveryNews(log_end, errors, store_rows, built):
            tables = None if built is None else vars(built)
            return {"delivery": log_end, "errors": errors, "rows": store_rows, "built": tables}
        case Ready():
            return {"ready": True}
        case Serving():
            return {"serving": True}
        case Beat():
            return {"beat": True}
        case Ask(id, kind):
            return {"ask": id, "kind": kind}
        case AskReply(id, body):
            return {"answer": id, "body": body}
    raise TypeError(f"not a channel message: {message!r}")


def _message(body: dict[str, Any]) -> Message:
    if "chain" in body:
        layers, levels = body["layers"], body["levels"]
        found = None if layers is None else tuple(_local(x) for x in layers)
        images = None if levels is None else tuple(LevelImage(Path(p), int(n)) for p, n in levels)
        return ChainNews(int(body["chain"]), found, images)
    if "cluster" in body:
        assignment = Assignment.from_json(orjson.dumps(body["cluster"]))
        fenced = frozenset(body["fenced"])
        topology = Topology(assignment, body["addresses"], fenced, scheme=body["scheme"])
        return ClusterNews(topology, body["described"], bool(body["connected"]))
    if "delivery" in body:
        ends = body["delivery"].items()
        log_end = {t: {int(p): int(e) for p, e in by.items()} for t, by in ends}
        errors = {int(c): str(e) for c, e in body["errors"].items()}
        rows = {str(s): int(n) for s, n in body["rows"].items()}
        return DeliveryNews(log_end, errors, rows, parse_built(body["built"]))
    if "ready" in body:
        return Ready()
    if "serving" in body:
        return Serving()
    if "beat" in body:
        return Beat()
    if "ask" in body:
        if body["kind"] not in ("sync", "metrics", "workers"):
            raise ValueError(f"no such ask: {body['kind']!r}")
        return Ask(int(body["ask"]), body["kind"])
    if "answer" in body:
        return AskReply(int(body["answer"]), body["body"])
    raise ValueError("no kind of message")


def _layer(layer: LocalLayer) -> list[Any]:
    return [layer.version, layer.kind, str(layer.path), layer.newest_append_ms, layer.traceparent]


def _local(raw: list[Any]) -> LocalLayer:
    version, kind, path, appended, traceparent = raw
    if kind not in ("base", "delta"):
        raise ValueError(f"no such layer kind: {kind!r}")
    layer_kind: Kind = kind
    return LocalLayer(int(version), layer_kind, Path(path), appended, traceparent)


Heard = Callable[[Message], Awaitable[None]]
Asked = Callable[[Ask], Awaitable[Any]]


class Link:
    """One end of a connection: sends messages, asks and awaits answers; hands what it hears
    to `heard` in order (a AskReply resolves its ask after every message before it was
    handled), and each ask to `asked` in a task of its own."""

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, heard: Heard, asked: Asked
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._heard = heard
        self._asked = asked
        self._asks = itertools.count(1)
        self.heard = time.monotonic()  # when the other end's last line was read
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._answering: set[asyncio.Task[None]] = set()

    def send(self, message: Message) -> None:
        if not self._writer.is_closing():
            self._writer.write(encode(message))

    async def ask(self, kind: AskKind, timeout: float) -> Any:
        """The other end's answer; TimeoutError, or ChannelError once the link closed."""
        if self._writer.is_closing():
            raise ChannelError("the channel closed")
        ask = Ask(next(self._asks), kind)
        waiting = self._waiting[ask.id] = asyncio.get_running_loop().create_future()
        try:
            self.send(ask)
            return await asyncio.wait_for(waiting, timeout)
        finally:
            self._waiting.pop(ask.id, None)

    async def run(self) -> None:
        """Until the other end closes the connection (or sends what is not a message)."""
        try:
            while line := await self._reader.readline():
                self.heard = time.monotonic()
                message = decode(line)
                if isinstance(message, AskReply):
                    waiting = self._waiting.get(message.id)
                    if waiting is not None and not waiting.done():
                        waiting.set_result(message.body)
                elif isinstance(message, Ask):
                    task = asyncio.create_task(self._answer(message))
                    self._answering.add(task)
                    task.add_done_callback(self._answering.discard)
                else:
                    await self._heard(message)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except (ChannelError, ValueError) as exc:  # ValueError: a line past LINE_LIMIT
            log.error("the workers' channel: %s; closed", exc)
        finally:
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_exception(ChannelError("the channel closed"))
            self.close()

    async def _answer(self, ask: Ask) -> None:
        self.send(AskReply(ask.id, await self._asked(ask)))

    def close(self) -> None:
        self._writer.close()
