"""The request context: the gateway's query service for this request, behind one DataLoader,
so every root field of a request joins one routed batch."""

from __future__ import annotations

from dataclasses import dataclass

from strawberry.dataloader import DataLoader

from gateway.batching import Outcome, RequestBatch, Work
from gateway.node import GatewayNode
from gateway.service import Load, RequestQueries


def batch_loader(batch: RequestBatch) -> Load:
    """Loads that all join `batch`: those made in one turn of the event loop are one call."""
    loader: DataLoader[Work, Outcome] = DataLoader(load_fn=batch.run, cache=False)
    return loader.load


@dataclass
class Context:
    node: GatewayNode
    batch: RequestBatch
    queries: RequestQueries

    @classmethod
    def create(cls, node: GatewayNode, authorization: str | None) -> Context:
        batch = node.request_batch(authorization)
        return cls.joining(node, batch, batch_loader(batch))

    @classmethod
    def joining(cls, node: GatewayNode, batch: RequestBatch, load: Load) -> Context:
        """A context of its own (its results' positions) whose loads join a shared batch:
        the subscriptions evaluated together (resolvers/live.py) send one routed batch."""
        return cls(node, batch, RequestQueries(node.project, load))

    def again(self) -> Context:
        """A fresh context on the same batch, for running the operation again."""
        return Context.joining(self.node, self.batch, self.queries.load)
