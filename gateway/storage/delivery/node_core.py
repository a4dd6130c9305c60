"""The collaborators a node's parts share, as one typed bundle: its project and id, the
topology it holds now, its snapshot catalog, the version switches it announces, and its
client of the peers. A node's delivery (sync.py), its keeper and a follower
(gateway/workers/) take it whole; it lives here, on the lowest floor that sees all of it."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.project import Project
from gateway.model.topology_view import TopologyView
from gateway.storage.catalog.snapshots import SnapshotCatalog
from gateway.storage.delivery.switches import Switches
from gateway.wire.peers import PeerClient


@dataclass(frozen=True)
class NodeCore:
    project: Project
    node_id: str
    topology: TopologyView
    catalog: SnapshotCatalog
    switches: Switches
    peers: PeerClient
