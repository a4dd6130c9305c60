"""A node's shared collaborators (gateway/storage/delivery/node_core.py) for tests that build a
node's parts one by one: membership, routing, batching over a mock or real transport. Its
catalog serves nothing, in a folder of its own removed at exit."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from contracts.project import Project
from contracts.topology import Topology
from gateway.model.topology_view import TopologyView
from gateway.storage.catalog.snapshots import SnapshotCatalog
from gateway.storage.delivery.node_core import NodeCore
from gateway.storage.delivery.switches import Switches
from gateway.wire.peers import PeerClient


def node_core(
    project: Project,
    peers: PeerClient,
    node_id: str = "node1",
    switches: Switches | None = None,
    topology: TopologyView | None = None,
) -> NodeCore:
    folder = Path(tempfile.mkdtemp(prefix="stategate-core-"))
    atexit.register(shutil.rmtree, folder, True)
    return NodeCore(
        project,
        node_id,
        topology or TopologyView(Topology.static(project.cluster)),
        SnapshotCatalog(folder, project, 1, "256MB"),
        switches or Switches(),
        peers,
    )
