"""The snapshot store: the folder the pipeline publishes snapshots and their manifest to.

<store>/p{partition:03d}/v{version:06d}.duckdb   a path is never reused; versions count up
<store>/manifest.json                            which version of each partition is current:
    {"format": 1,
     "partitions": {"<p>": {"version", "path", "sha256", "size", "position": {topic: offset},
                            "created_ms"}},
     "log_end": {"<topic>": {"<p>": offset}},
     "updated_ms": ...}

Serving nodes read the manifest and copy the files they host; notify_nodes tells them to look.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson

from gateway.config import Node, Project
from spark_pipeline.durable import fsync_dir

MANIFEST = "manifest.json"
FORMAT = 1
_VERSION_FILE = re.compile(r"^v(\d{6,})\.duckdb$")


def snapshot_path(partition: int, version: int) -> str:
    """The file of one version, relative to the store folder."""
    return f"p{partition:03d}/v{version:06d}.duckdb"


def versions_on_disk(store_dir: Path, partition: int) -> list[int]:
    """Every published version of a partition, oldest first (manifest or not)."""
    folder = store_dir / f"p{partition:03d}"
    if not folder.is_dir():
        return []
    matches = (_VERSION_FILE.match(p.name) for p in folder.iterdir())
    return sorted(int(m.group(1)) for m in matches if m)


def read_manifest(store_dir: Path) -> dict:
    try:
        manifest: dict = orjson.loads((store_dir / MANIFEST).read_bytes())
    except FileNotFoundError:
        return {"format": FORMAT, "partitions": {}, "log_end": {}, "updated_ms": 0}
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{store_dir / MANIFEST}: unknown format {manifest.get('format')!r}")
    return manifest


def write_manifest(store_dir: Path, manifest: dict) -> None:
    """Replace the manifest atomically: readers see the old one or the new one."""
    store_dir.mkdir(parents=True, exist_ok=True)
    tmp = store_dir / f".{MANIFEST}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, store_dir / MANIFEST)
    fsync_dir(store_dir)


def prune(store_dir: Path, manifest: dict, keep: int = 3) -> list[Path]:
    """Delete all but the newest `keep` versions up to the current one, per partition; versions
    above the current one (a run in progress or one that crashed) are left alone."""
    removed = []
    for key, entry in manifest["partitions"].items():
        partition = int(key)
        older = [v for v in versions_on_disk(store_dir, partition) if v <= entry["version"]]
        for version in older[:-keep] if keep > 0 else older:
            path = store_dir / snapshot_path(partition, version)
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
            f"{node.url}/internal/sync", headers={"x-stategate-secret": secret}, timeout=30.0
        )
    except Exception as exc:  # any failure is reported, not raised
        return f"{type(exc).__name__}: {exc}"
    if response.is_success:
        return "ok"
    return f"HTTP {response.status_code}: {response.text[:200]}"
