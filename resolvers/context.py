"""The request context: one batch, behind one DataLoader, for all root fields of a request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strawberry.dataloader import DataLoader

from gateway.batching import Outcome, RequestBatch, Work
from gateway.positions import Position

if TYPE_CHECKING:
    from gateway.node import GatewayNode


@dataclass
class Context:
    node: GatewayNode
    batch: RequestBatch
    loader: DataLoader[Work, Outcome]
    tokens: list[Position] = field(default_factory=list)  # one per result, for the response token

    @classmethod
    def create(cls, node: GatewayNode, authorization: str | None) -> Context:
        batch = node.request_batch(authorization)
        return cls(node=node, batch=batch, loader=DataLoader(load_fn=batch.run, cache=False))
