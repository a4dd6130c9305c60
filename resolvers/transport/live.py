"""Live results: every subscription is a query evaluated again when the state it reads
changes, and pushed only when its result did.

Identical subscriptions (same document, operation, variables and authorization) form one
Cohort, evaluated once and fanned out to all its subscribers. A cohort is evaluated when it
is created, then whenever a partition it read switches version, on this node or on a peer
(gateway/storage/delivery/switches.py), and when a peer hosting a partition its last result
failed on is reachable again (gateway/cluster/health.py): a restarted replica serving the
snapshots it had switches nothing. No timer: a replica behind a bound, or without the partition yet,
answers after a switch; a failure that neither event ends (a replica's store exception, this
node's own pool exhausted) waits for the next of them. The cohorts due at once are evaluated
together: their reads join one routed batch, so each owning node gets one internal request.

An update goes out only when the result (data and errors) differs from the last one sent,
and only when its position is not behind it on any partition both read: a subscriber's
positions only move forward, even when a replica that is behind answers. Each subscriber
holds at most one update not yet sent: a newer one replaces it, and the one that finally
goes out counts the updates it replaced (`extensions.skipped`), so a slow client costs one
pending update, never a queue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from graphql import GraphQLError
from strawberry.types import ExecutionResult

from contracts.access import Principal
from contracts.errors import GatewayError
from contracts.positions import Position, encode_token, merge
from gateway.node import GatewayNode
from resolvers.execution import client_errors, results
from resolvers.execution.operations import Operations, Prepared, Refused
from resolvers.execution.persisted import Source
from resolvers.schema.context import Context, batch_loader

log = logging.getLogger(__name__)
EVALUATED_TOGETHER = 500  # cohorts per shared batch: bounds one internal request's size
BEHIND_RETRY_S = 0.05  # a cohort answered by a worker behind its node's switch: again after
BEHIND_RETRIES = 40  # ... and at most this many times in a row (2 s)
_INTERNAL = {
    "message": "the subscription could not be evaluated",
    "extensions": {"code": "INTERNAL_SERVER_ERROR"},
}


@dataclass(frozen=True)
class Operation:
    """A subscription as the client asked it, checked (its document rewritten as the query
    it mirrors, resolvers/execution/operations.py)."""

    prepared: Prepared
    variables: dict[str, Any] | None
    authorization: str | None  # keys the cohort: one principal's results are its own
    principal: Principal

    @property
    def key(self) -> tuple[str, str | None, bytes, str | None]:
        variables = orjson.dumps(self.variables, option=orjson.OPT_SORT_KEYS)
        return (self.prepared.query, self.prepared.name, variables, self.authorization)


@dataclass(frozen=True)
class Update:
    """One result of a cohort, serialized once for all its subscribers."""

    revision: int  # the cohort's count of updates, this one included
    body: bytes  # {"data": ..., "errors": ...}
    extensions: dict[str, Any]
    payload: bytes  # the body with its extensions

    @classmethod
    def of(cls, revision: int, body: bytes, extensions: dict[str, Any]) -> Update:
        return cls(revision, body, extensions, _with_extensions(body, extensions))

    def payload_skipping(self, skipped: int) -> bytes:
        if not skipped:
            return self.payload
        return _with_extensions(self.body, {**self.extensions, "skipped": skipped})


def _with_extensions(body: bytes, extensions: dict[str, Any]) -> bytes:
    return body[:-1] + b',"extensions":' + orjson.dumps(extensions) + b"}"


class Subscriber:
    """One subscription of a connection: the update it has yet to send, if any; or the
    errors it ends with, when the node ended it."""

    def __init__(self, id: str, ready: Callable[[Subscriber], None]) -> None:
        self.id = id
        self.pending: Update | None = None
        self.skipped = 0
        self.revision = 0  # of the latest update offered
        self.ended: list[dict[str, Any]] | None = None
        self._ready = ready

    def end(self, errors: list[dict[str, Any]]) -> None:
        """End it with `errors`, its pending update dropped: its connection sends them."""
        if self.ended is None:
            self.ended, self.pending = errors, None
            self._ready(self)

    def offer(self, update: Update) -> None:
        if update.revision <= self.revision:
            return  # had it already: it joined as its cohort was being evaluated
        self.revision = update.revision
        if self.pending is not None:
            self.skipped += 1
        else:
            self._ready(self)
        self.pending = update

    def take(self) -> bytes | None:
        """The payload to send now, or None."""
        update, skipped = self.pending, self.skipped
        self.pending, self.skipped = None, 0
        return None if update is None else update.payload_skipping(skipped)


@dataclass(eq=False)
class Cohort:
    operation: Operation
    subscribers: set[Subscriber] = field(default_factory=set)
    reads: frozenset[int] | None = None  # partitions read last time; None: all of them
    stores: frozenset[str] = frozenset()  # the stores read last time
    unanswered: frozenset[int] = frozenset()  # those of them that failed
    latest: Update | None = None
    position: Position = field(default_factory=dict)  # the highest of every update sent
    revision: int = 0
    evaluated: asyncio.Event = field(default_factory=asyncio.Event)
    failed: list[dict[str, Any]] | None = None
    behind: int = 0  # evaluations in a row answered by a node behind its own switch
    settled: int = 0  # evaluations done

    def settle(self, result: ExecutionResult, context: Context) -> Update | None:
        """Record an evaluation; the update to push, or None when nothing is to be sent."""
        queries = context.queries
        self.reads = frozenset(queries.partitions) or None
        self.stores = frozenset(queries.stores)
        self.unanswered = frozenset(queries.failed)
        body = results.response(result)
        if self.latest is None and body.get("data") is None:
            self.failed = body.get("errors") or []  # refused to each subscriber, who logs it
            return None
        if self.latest is None and body.get("errors"):  # a first result with errors: once
            who = client_errors.Who(subject=self.operation.principal.subject)  # of any client
            client_errors.refused(body["errors"], self.operation.prepared.name, "websocket", who)
        serialized = orjson.dumps({k: v for k, v in body.items() if k != "extensions"})
        position = queries.response_token()
        if self.latest is not None and (
            serialized == self.latest.body or _behind(position, self.position)
        ):
            return None
        self.revision += 1
        extensions = {
            "consistencyToken": encode_token(position),
            "position": _tree(position),
            "revision": self.revision,
        }
        self.latest = Update.of(self.revision, serialized, extensions)
        self.position = merge([self.position, position])  # a partition that failed this time
        return self.latest  # keeps the offset sent before: later updates may not go below it


def _schema_changed(error: GraphQLError) -> dict[str, Any]:
    message = f"the subscription ended: the schema this node serves changed ({error.message})"
    return {"message": message, "extensions": {"code": "SCHEMA_CHANGED"}}


def _behind(position: Position, sent: Position) -> bool:
    return any(offset < sent[tp] for tp, offset in position.items() if tp in sent)


def _tree(position: Position) -> dict[str, dict[str, str]]:
    """{topic: {partition: offset}}, each offset a decimal string as a Long is in the data."""
    tree: dict[str, dict[str, str]] = {}
    for (topic, partition), offset in sorted(position.items()):
        tree.setdefault(topic, {})[str(partition)] = str(offset)
    return tree


class Hub:
    """A node's cohorts, and the task that evaluates those a switch made due."""

    def __init__(self, node: GatewayNode, operations: Operations) -> None:
        self.node = node
        self.operations = operations
        self.cohorts: dict[tuple[str, str | None, bytes, str | None], Cohort] = {}
        self.counts = node.live
        self._due: set[Cohort] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._returns = 0  # peers that came back so far
        node.switches.listen(self._switched)
        node.membership.when_back(self._peer_back)
        self._serving = node.served
        node.when_served(self._served)  # after the schema switched (stategate/app.py)

    def start(self) -> None:
        self._task = asyncio.create_task(self._evaluate_forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def reading(self) -> dict[str, int]:
        """Each store's open subscriptions here: those whose last evaluation read it."""
        found: dict[str, int] = {}
        for cohort in self.cohorts.values():
            for store in cohort.stores:
                found[store] = found.get(store, 0) + len(cohort.subscribers)
        return found

    def refusal(self) -> GatewayError | None:
        """Why one more subscription would be refused on this node, if it would."""
        limit = self.node.project.settings.max_subscriptions
        if self.counts.subscriptions < limit:
            return None
        return GatewayError(
            "TOO_MANY_SUBSCRIPTIONS",
            f"this node serves {limit} subscriptions already (max_subscriptions)",
        )

    async def join(self, operation: Operation, subscriber: Subscriber) -> None:
        """Subscribe: the cohort's latest result is offered at once (a new cohort is
        evaluated first, with whatever else is due). Raises Refused when its first
        evaluation was refused (variables that do not fit, a limit)."""
        key = operation.key
        cohort = self.cohorts.get(key)
        if cohort is None:
            cohort = self.cohorts[key] = Cohort(operation)
            self.counts.cohorts += 1
            self._due.add(cohort)
            self._wake.set()
        if subscriber not in cohort.subscribers:
            cohort.subscribers.add(subscriber)
            self.counts.subscriptions += 1
        await cohort.evaluated.wait()
        if cohort.failed is not None:
            self.leave(operation, subscriber)
            raise Refused(cohort.failed)
        if cohort.latest is not None:
            subscriber.offer(cohort.latest)

    def leave(self, operation: Operation, subscriber: Subscriber) -> None:
        cohort = self.cohorts.get(operation.key)
        if cohort is None or subscriber not in cohort.subscribers:
            return
        cohort.subscribers.discard(subscriber)
        self.counts.subscriptions -= 1
        if not cohort.subscribers:
            del self.cohorts[operation.key]
            self.counts.cohorts -= 1
            self._due.discard(cohort)

    def _served(self, stores: frozenset[str]) -> None:
        """The schema stopped reading tables (README: Changing stores): a store removed, or
        read from its new declaration's table. Each cohort whose document no longer
        validates against it ends, with SCHEMA_CHANGED and why; the others are prepared
        again, so that they read the tables it reads, and evaluated."""
        lost, self._serving = self._serving - stores, stores
        if not lost:
            return
        for cohort in list(self.cohorts.values()):
            operation = cohort.operation
            invalid = self.operations.invalid(operation.prepared.document)
            if invalid:
                self._end(cohort, [_schema_changed(error) for error in invalid])
                continue
            source = Source(operation.prepared.query, operation.prepared.name)
            try:
                prepared = self.operations.prepare(source, operation.variables)
            except Refused as refused:  # a limit its new tables' rows no longer fit
                self._end(cohort, refused.errors)
                continue
            cohort.operation = dataclasses.replace(operation, prepared=prepared)
            self._mark_due([cohort])

    def _end(self, cohort: Cohort, errors: list[dict[str, Any]]) -> None:
        subscribers = list(cohort.subscribers)
        for subscriber in subscribers:
            subscriber.end(errors)
            self.leave(cohort.operation, subscriber)
        log.info(
            "%d subscriptions of %s ended: the schema served no longer has what they read",
            len(subscribers), cohort.operation.prepared.name or "an anonymous operation",
        )  # fmt: skip

    def _switched(self, partitions: frozenset[int]) -> None:
        self._mark_due(
            c
            for c in self.cohorts.values()
            if c.reads is None or not c.reads.isdisjoint(partitions)
        )

    def _peer_back(self, node_id: str) -> None:
        self._returns += 1
        hosted = self.node.project.cluster.hosted_by(node_id)
        self._mark_due(c for c in self.cohorts.values() if not c.unanswered.isdisjoint(hosted))

    def _mark_due(self, cohorts: Iterable[Cohort]) -> None:
        self._due.update(cohorts)
        if self._due:
            self._wake.set()

    async def _evaluate_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            due, self._due = list(self._due), set()
            try:
                await self._evaluate(due)
            except Exception:  # a bug must not end live updates for good
                log.exception("evaluating subscriptions failed")

    async def _evaluate(self, cohorts: list[Cohort]) -> None:
        """Evaluate cohorts together (one shared batch per authorization and chunk) and
        push what changed."""
        by_authorization: dict[str | None, list[Cohort]] = defaultdict(list)
        for cohort in cohorts:
            by_authorization[cohort.operation.authorization].append(cohort)
        for authorization, group in by_authorization.items():
            for start in range(0, len(group), EVALUATED_TOGETHER):
                chunk = group[start : start + EVALUATED_TOGETHER]
                batch = self.node.request_batch(authorization)
                load = batch_loader(batch)
                principal = chunk[0].operation.principal  # the authorization's
                contexts = [Context.joining(self.node, batch, load, principal) for _ in chunk]
                returns = self._returns
                outcomes = await asyncio.gather(
                    *(self._run(c, context) for c, context in zip(chunk, contexts, strict=True)),
                    return_exceptions=True,
                )
                for cohort, outcome in zip(chunk, outcomes, strict=True):
                    self._settle(cohort, outcome, peer_back=self._returns != returns)
        self.counts.evaluations += len(cohorts)

    def _settle(
        self,
        cohort: Cohort,
        outcome: tuple[ExecutionResult, Context] | BaseException,
        peer_back: bool,
    ) -> None:
        """Push what an evaluation changed; `peer_back`: a peer came back meanwhile."""
        if isinstance(outcome, BaseException):
            log.error("a subscription failed to evaluate", exc_info=outcome)
            if cohort.latest is None:
                cohort.failed = [_INTERNAL]
        else:
            cohort.settled += 1
            self._push(cohort, cohort.settle(*outcome))
            if cohort.unanswered and peer_back:
                self._mark_due([cohort])  # its calls may have failed before the peer was back
            self._again_if_behind(cohort, outcome[1])
        cohort.evaluated.set()

    def _again_if_behind(self, cohort: Cohort, context: Context) -> None:
        """A node of several workers tells of a switch once one of them serves it; another
        may answer from the version before for a few milliseconds. A cohort answered so is
        evaluated again after BEHIND_RETRY_S, at most BEHIND_RETRIES times in a row: the
        switch that made it due will not come again. (A switch heard after the answer has
        made it due already; one heard before the retry makes it needless.)"""
        if cohort in self._due:
            return
        if not self.node.behind(context.queries.answered):
            cohort.behind = 0
        elif cohort.behind < BEHIND_RETRIES:
            cohort.behind += 1
            loop = asyncio.get_running_loop()
            loop.call_later(BEHIND_RETRY_S, self._retry, cohort, cohort.settled)

    def _retry(self, cohort: Cohort, settled: int) -> None:
        """Evaluate a cohort answered behind again, unless evaluated since."""
        if cohort.settled == settled:
            self._mark_due([cohort])

    @staticmethod
    def _push(cohort: Cohort, update: Update | None) -> None:
        if update is not None:
            for subscriber in cohort.subscribers:
                subscriber.offer(update)

    async def _run(self, cohort: Cohort, context: Context) -> tuple[ExecutionResult, Context]:
        operation = cohort.operation
        result = await self.operations.execute(operation.prepared, context, operation.variables)
        return result, context
