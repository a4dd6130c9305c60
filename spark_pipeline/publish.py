"""The snapshot store: the folder the pipeline publishes snapshots and their manifest to.

<store>/p<partition>/v<version>.duckdb   contracts/snapshot_file.py; a path is never reused
<store>/manifest.json                    contracts/manifest.py: which version is current

Serving nodes read the manifest and copy the files they host; notify_nodes tells them to look.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from contracts.auth import secret_headers
from contracts.manifest import Manifest
from contracts.project import Node, Project
from contracts.snapshot_file import partition_folder, relative_path, version_of

NOTIFY_TIMEOUT_S = 30.0


def versions_on_disk(store_dir: Path, partition: int) -> list[int]:
    """Every published version of a partition, oldest first (manifest or not)."""
    folder = store_dir / partition_folder(partition)
    if not folder.is_dir():
        return []
    versions = (version_of(p.name) for p in folder.iterdir())
    return sorted(v for v in versions if v is not None)


def prune(store_dir: Path, manifest: Manifest, keep: int = 3) -> list[Path]:
    """Delete all but the newest `keep` versions up to the current one, per partition; versions
    above the current one (a run in progress or one that crashed) are left alone."""
    removed = []
    for partition, entry in manifest.partitions.items():
        older = [v for v in versions_on_disk(store_dir, partition) if v <= entry.version]
        for version in older[:-keep] if keep > 0 else older:
            path = store_dir / relative_path(partition, version)
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def notify_nodes(project: Project, partitions: set[int]) -> dict[str, str]:
    """POST /internal/sync to each node hosting a changed partition; "ok" or the error per
    node. Never raises: a node that is down pulls the manifest when it starts."""
    cluster = project.cluster
    nodes = [n for n in cluster.nodes if partitions & set(cluster.hosted_by(n.id))]
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=min(len(nodes), 16)) as pool:
        results = pool.map(lambda n: _notify(n, cluster.secret), nodes)
        return {node.id: result for node, result in zip(nodes, results, strict=True)}


def _notify(node: Node, secret: str) -> str:
    try:
        response = httpx.post(
            f"{node.url}/internal/sync", headers=secret_headers(secret), timeout=NOTIFY_TIMEOUT_S
        )
    except httpx.HTTPError as exc:  # any failure to reach it is reported, not raised
        return f"{type(exc).__name__}: {exc}"
    if response.is_success:
        return "ok"
    return f"HTTP {response.status_code}: {response.text[:200]}"
