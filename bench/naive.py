"""The naive query layer the seeds describe (seeds 000-002), built minimally for comparison.

One small Starlette app per node opens the snapshot files in its own data dir (one read-only
DuckDB connection per file) and serves GET /key/{key}: if the key's partition is local (the
node hosts it, as active or standby), a point query; otherwise the request is forwarded over
HTTP (httpx, keep-alive) to the partition's active node and its JSON is returned. The client
asks each key with its own request.

    python -m bench.naive --config .bench/main/stategate.toml --node node1
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import duckdb
import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from contracts import project as config
from contracts.partitioner import partition_for
from contracts.project import Project
from contracts.snapshot_file import parse_file_name

COLUMNS = ("bookings", "revenue", "seats", "cheapest", "dearest")


def local_files(folder: Path, hosted: list[int]) -> dict[int, Path]:
    """The newest base file of each hosted partition in a node's snapshot folder (the bench's
    state is built in one run: a base alone)."""
    newest: dict[int, tuple[int, Path]] = {}
    for partition in hosted:
        for path in folder.glob(f"p{partition:03d}/v*.base.duckdb"):
            parsed = parse_file_name(path.name)
            if parsed and parsed[0] > newest.get(partition, (0, path))[0]:
                newest[partition] = (parsed[0], path)
    return {p: path for p, (_, path) in newest.items()}


class LocalStore:
    def __init__(self, files: dict[int, Path]) -> None:
        self.cons = {
            p: duckdb.connect(
                str(path), read_only=True, config={"threads": 1, "memory_limit": "256MB"}
            )
            for p, path in files.items()
        }
        self._local = threading.local()
        cols = ", ".join(f'"{c}"' for c in COLUMNS)
        self.sql = f'SELECT {cols} FROM "customerTotals" WHERE key = ?'

    def get(self, partition: int, key: str) -> dict[str, Any] | None:
        cursors: dict[int, duckdb.DuckDBPyConnection] = getattr(self._local, "cursors", {})
        self._local.cursors = cursors
        cursor = cursors.get(partition)
        if cursor is None:
            cursor = cursors[partition] = self.cons[partition].cursor()
        row = cursor.execute(self.sql, [key]).fetchone()
        return None if row is None else {"key": key, **dict(zip(COLUMNS, row, strict=True))}

    def close(self) -> None:
        for con in self.cons.values():
            con.close()


def create_app(project: Project, node_id: str) -> Starlette:
    cluster = project.cluster
    folder = cluster.node(node_id).data_dir / "snapshots"
    store = LocalStore(local_files(folder, cluster.hosted_by(node_id)))
    client = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=64, max_keepalive_connections=64), timeout=30
    )

    async def get_key(request: Request) -> Response:
        key = request.path_params["key"]
        partition = partition_for(key, "string", cluster.partitions)
        if partition in store.cons:
            record = await run_in_threadpool(store.get, partition, key)
            status = 200 if record is not None else 404
            body = record if record is not None else {"key": key, "error": "not found"}
            return Response(orjson.dumps(body), status, media_type="application/json")
        if request.query_params.get("forwarded"):
            return Response(b'{"error": "not local"}', 500, media_type="application/json")
        owner = cluster.node(cluster.replica_map[partition][0])
        forwarded = await client.get(f"{owner.url}/key/{quote(key)}?forwarded=1")
        return Response(forwarded.content, forwarded.status_code, media_type="application/json")

    async def health(request: Request) -> Response:
        return Response(orjson.dumps({"node": node_id, "partitions": sorted(store.cons)}))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await client.aclose()
        store.close()

    return Starlette(
        routes=[Route("/key/{key}", get_key), Route("/health", health)], lifespan=lifespan
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A naive per-key query node (benchmark only).")
    parser.add_argument("--config", required=True)
    parser.add_argument("--node", required=True)
    args = parser.parse_args(argv)
    project = config.load(args.config)
    host, port = project.cluster.node(args.node).address.rsplit(":", 1)
    uvicorn.run(create_app(project, args.node), host=host, port=int(port), log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
