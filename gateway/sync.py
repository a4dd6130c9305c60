"""Delivery: a node pulls the snapshots of the partitions it hosts from the snapshot store.

The store is a directory (local or shared file system) or an http(s) URL served by
`stategate store`, authenticated with the cluster secret. A file is downloaded under a
hidden name in the node's own data directory, its size and sha256 are checked against the
manifest, and only then is it renamed and attached; anything else is deleted and the
previous version keeps serving. A version that failed is tried again after a backoff that
doubles per attempt (from `sync_interval_s` up to a minute), not on every sync: a damaged
file in the store must not be downloaded every two seconds. An explicit sync (the
pipeline's notification, POST /internal/sync) tries at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import httpx
import orjson

from gateway.config import Project
from gateway.protocol import PEER_ERRORS, SECRET_HEADER
from gateway.snapshots import SnapshotCatalog, SnapshotError, file_name

log = logging.getLogger(__name__)
_CHUNK = 1 << 20
_MAX_BACKOFF_S = 60.0


class DeliveryError(Exception):
    """A snapshot that did not arrive intact."""


# The store could not be read (down, or a manifest that is not JSON).
STORE_UNREACHABLE: tuple[type[Exception], ...] = (ValueError, *PEER_ERRORS)
# A manifest entry that did not install (KeyError, TypeError: an entry not as written).
_NOT_INSTALLED: tuple[type[Exception], ...] = (
    DeliveryError,
    SnapshotError,
    KeyError,
    TypeError,
    *PEER_ERRORS,
)


@dataclass
class _Refusal:
    """A manifest entry that failed to install, and when to try it again."""

    sha256: str
    attempts: int
    retry_at: float  # time.monotonic()


class SnapshotSync:
    def __init__(
        self, project: Project, node_id: str, catalog: SnapshotCatalog, client: httpx.AsyncClient
    ) -> None:
        self.project = project
        self.node_id = node_id
        self.catalog = catalog
        self.client = client
        self.manifest: dict[str, Any] = {}
        self.errors: dict[int, str] = {}
        self._refused: dict[int, _Refusal] = {}
        self._lock = asyncio.Lock()
        self._remote = "://" in project.snapshot_url

    async def run_once(self, force: bool = False) -> dict[int, int]:
        """Install every newer version the manifest lists; returns partition -> version.
        Versions that failed before wait for their backoff unless `force`."""
        async with self._lock:
            self.manifest = await self._read_manifest()
            installed: dict[int, int] = {}
            entries = self.manifest.get("partitions", {})
            for partition in self.project.cluster.hosted_by(self.node_id):
                entry = entries.get(str(partition))
                if entry is None or entry["version"] <= self.catalog.version(partition):
                    continue
                refusal = self._refused.get(partition)
                if refusal is not None and refusal.sha256 != str(entry.get("sha256")):
                    refusal = None  # a new file: its own first attempt
                if refusal is not None and not force and time.monotonic() < refusal.retry_at:
                    continue
                try:
                    await self._install(partition, entry)
                except _NOT_INSTALLED as exc:
                    self._refuse(partition, entry, refusal, exc)
                else:
                    self.errors.pop(partition, None)
                    self._refused.pop(partition, None)
                    installed[partition] = entry["version"]
            return installed

    def _refuse(
        self, partition: int, entry: dict[str, Any], last: _Refusal | None, exc: Exception
    ) -> None:
        attempts = last.attempts + 1 if last else 1
        delay = min(self.project.settings.sync_interval_s * 2 ** (attempts - 1), _MAX_BACKOFF_S)
        retry_at = time.monotonic() + delay
        self._refused[partition] = _Refusal(str(entry.get("sha256")), attempts, retry_at)
        self.errors[partition] = (
            f"version {entry['version']}: {exc} (attempt {attempts}, next in {delay:g} s)"
        )
        log.warning("partition %s not updated: %s", partition, self.errors[partition])

    async def run_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.run_once()
            except STORE_UNREACHABLE as exc:
                log.warning("snapshot store unreachable: %s", exc)
            except Exception:  # a bug must not end syncing for good
                log.exception("syncing snapshots failed")

    def log_end(self, topic: str, partition: int) -> int | None:
        return self.manifest.get("log_end", {}).get(topic, {}).get(str(partition))

    async def _read_manifest(self) -> dict[str, Any]:
        if self._remote:
            response = await self.client.get(
                f"{self.project.snapshot_url}/manifest.json", headers=self._auth()
            )
            if response.status_code == 404:
                return {}
            response.raise_for_status()
            return orjson.loads(response.content)
        path = Path(self.project.snapshot_url) / "manifest.json"
        return orjson.loads(path.read_bytes()) if path.exists() else {}

    async def _install(self, partition: int, entry: dict[str, Any]) -> None:
        version = int(entry["version"])
        final = self.catalog.folder / file_name(partition, version)
        tmp = self.catalog.folder / f".incoming-{final.name}"
        try:
            digest, size = await self._fetch(entry["path"], tmp)
            if size != entry["size"] or digest != entry["sha256"]:
                raise DeliveryError(
                    f"checksum mismatch: got {size} bytes sha256 {digest[:12]}, "
                    f"manifest says {entry['size']} bytes sha256 {entry['sha256'][:12]}"
                )
            os.rename(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        try:
            await asyncio.to_thread(self.catalog.install, partition, version, final)
        except SnapshotError:
            final.unlink(missing_ok=True)
            raise

    async def _fetch(self, relative: str, target: Path) -> tuple[str, int]:
        """Copy one file of the store to target; returns its sha256 and size. Disk writes,
        hashing and fsync run in a worker thread, never on the event loop."""
        digest = hashlib.sha256()
        with open(target, "wb") as out:
            if self._remote:
                url = f"{self.project.snapshot_url}/{relative}"
                async with self.client.stream("GET", url, headers=self._auth()) as response:
                    response.raise_for_status()
                    async for chunk in response.aiter_bytes(_CHUNK):
                        await asyncio.to_thread(_absorb, chunk, digest, out)
            else:
                source = Path(self.project.snapshot_url) / relative
                await asyncio.to_thread(_copy, source, digest, out)
            await asyncio.to_thread(_sync, out)
            size = out.tell()
        return digest.hexdigest(), size

    def _auth(self) -> dict[str, str]:
        return {SECRET_HEADER: self.project.cluster.secret}


def _absorb(chunk: bytes, digest: Any, out: BinaryIO) -> None:
    digest.update(chunk)
    out.write(chunk)


def _copy(source: Path, digest: Any, out: BinaryIO) -> None:
    with open(source, "rb") as src:
        while chunk := src.read(_CHUNK):
            _absorb(chunk, digest, out)


def _sync(out: BinaryIO) -> None:
    out.flush()
    os.fsync(out.fileno())
