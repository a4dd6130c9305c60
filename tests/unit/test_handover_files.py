"""What a node hands over leaves its disk (README, Elastic clusters; issue 47, 8): once the
queries under way let go of a partition, its base and deltas go at once, and the images of
its levels (what the node's other workers map) LEVEL_DELETE_DELAY_S later, at the next sync
round's settle, whatever versions it served before."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from contracts.project import load
from contracts.snapshot_file import parse_file_name, relative_path
from gateway.storage.catalog import hub
from gateway.storage.catalog.layers import LocalLayer
from gateway.storage.catalog.snapshots import SnapshotCatalog
from tests.chains import WrittenChain
from tests.projects import write_project

PARTITION = 1
ROUNDS = 6  # a base, then deltas
DELAY_S = 0.2


def test_a_partition_handed_over_leaves_no_file_once_its_last_query_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hub, "LEVEL_DELETE_DELAY_S", DELAY_S)
    project = load(write_project(tmp_path, [1, 2, 3], partitions=3))
    catalog = SnapshotCatalog(tmp_path / "node", project, 1, "256MB", images=True)
    try:
        chain = WrittenChain(project, tmp_path / "store", PARTITION)
        local: list[LocalLayer] = []
        for seed in range(ROUNDS):
            layer = chain.next_layer(seed)
            path = catalog.folder / relative_path(PARTITION, layer.version, layer.kind)
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(chain.store_root / layer.path, path)
            local.append(LocalLayer(layer.version, layer.kind, path))
            assert catalog.install(PARTITION, list(local)) is not None
        folder = local[0].path.parent
        images = [p for p in folder.iterdir() if p.name.endswith(".level")]
        assert images, "the test needs level images"
        with catalog.lease(PARTITION) as held:  # a query under way
            assert held is not None
            assert catalog.drop(PARTITION)
            assert all(p.exists() for p in (*images, *(x.path for x in local)))
        left = list(folder.iterdir())
        assert not [p for p in left if parse_file_name(p.name)], "base and deltas go at once"
        time.sleep(DELAY_S)
        catalog.settle()  # the next sync round
        assert list(folder.iterdir()) == []
    finally:
        catalog.close()
