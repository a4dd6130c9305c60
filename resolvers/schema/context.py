"""The request context: the gateway's query service for this request, whose root fields
join one routed batch (through a DataLoader, when there are several of them); and who is
asking (the Principal the transport verified), so every root field checks what it may read."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass

from strawberry.dataloader import DataLoader

from contracts.access import Principal
from contracts.errors import GatewayError
from gateway.cluster.batching import Outcome, RequestBatch, Work
from gateway.model.visibility import EVERYTHING, Visibility
from gateway.node import GatewayNode
from gateway.service import Load, RequestQueries


def batch_loader(batch: RequestBatch) -> Load:
    """Loads that all join `batch`: those made in one turn of the event loop are one call."""
    loader: DataLoader[Work, Outcome] = DataLoader(load_fn=batch.run, cache=False)

    def load(works: list[Work]) -> Awaitable[list[Outcome]]:
        if len(works) == 1:  # nearly always: a gather of one costs a thousand aliases dearly
            return _alone(loader.load(works[0]))
        return loader.load_many(works)

    return load


async def _alone(outcome: Awaitable[Outcome]) -> list[Outcome]:
    return [await outcome]


@dataclass
class Context:
    node: GatewayNode
    batch: RequestBatch
    queries: RequestQueries
    principal: Principal
    lone: bool = False  # the batch is this one root field's alone

    @classmethod
    def create(
        cls, node: GatewayNode, authorization: str | None, principal: Principal, lone: bool = False
    ) -> Context:
        """The context of a request; of a `lone` root field, whose reads come one at a time,
        so they need no loader to join them: it calls the batch itself."""
        batch = node.request_batch(authorization)
        if not lone:
            return cls.joining(node, batch, batch_loader(batch), principal)
        queries = RequestQueries(
            node.project,
            node.topology.current,
            batch.run,
            node.read_store,
            _visibility(node, principal),
        )
        return cls(node, batch, queries, principal, lone=True)

    @classmethod
    def joining(
        cls, node: GatewayNode, batch: RequestBatch, load: Load, principal: Principal
    ) -> Context:
        """A context of its own (its results' positions) whose loads join a shared batch:
        the subscriptions evaluated together (resolvers/transport/live.py) send one routed
        batch."""
        visible = _visibility(node, principal)
        queries = RequestQueries(
            node.project, node.topology.current, load, node.read_store, visible
        )
        return cls(node, batch, queries, principal)

    def again(self) -> Context:
        """A fresh context on the same batch, for running the operation again."""
        return Context.joining(self.node, self.batch, self.queries.load, self.principal)

    def authorize(self, name: str) -> None:
        """Raise FORBIDDEN unless the principal may read the root field `name` (a store,
        "cluster" or "stores"); without [auth], anyone may."""
        access = self.node.project.access
        if access is not None and not access.permits(self.principal, name):
            roles = ", ".join(sorted(self.principal.roles)) or "none"
            raise GatewayError("FORBIDDEN", f"the token's roles ({roles}) may not read {name}")


def _visibility(node: GatewayNode, principal: Principal) -> Visibility:
    """What of each store the principal may read: everything without [auth]."""
    access = node.project.access
    return EVERYTHING if access is None else Visibility(access, principal)
