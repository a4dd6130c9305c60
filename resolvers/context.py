"""The request context: the gateway's query service for this request, behind one DataLoader,
so every root field of a request joins one routed batch."""

from __future__ import annotations

from dataclasses import dataclass

from strawberry.dataloader import DataLoader

from gateway.batching import Outcome, RequestBatch, Work
from gateway.node import GatewayNode
from gateway.service import RequestQueries


@dataclass
class Context:
    node: GatewayNode
    batch: RequestBatch
    queries: RequestQueries

    @classmethod
    def create(cls, node: GatewayNode, authorization: str | None) -> Context:
        batch = node.request_batch(authorization)
        loader: DataLoader[Work, Outcome] = DataLoader(load_fn=batch.run, cache=False)
        return cls(node, batch, RequestQueries(node.project, loader.load))
