"""A task's layer files: written in the pipeline's working folder on the host that runs the
task, and pushed to the object store when the project names one; the layers below a new one
are read from that folder, fetched from the object store first where this host lacks them
(an executor on another host, a working folder started empty). A fetched layer is checked
against the manifest's size and sha256 before anything reads it."""

from __future__ import annotations

import functools
import hashlib
import tempfile
from pathlib import Path

from contracts.manifest import Layer
from snapshot_store import SnapshotStore, StoreError, open_store


def scratch(url: str) -> str:
    """An executor's working folder for the object store at `url`: its host's own, never the
    driver's (which a host of a real cluster does not have), kept across its tasks so that a
    layer fetched once serves the next."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return str(Path(tempfile.gettempdir()) / f"stategate-layers-{digest}")


def push(url: str | None, relative: str, path: Path) -> None:
    """Store a new layer in the object store at `url` (nothing to do without one)."""
    if url is not None:
        _store(url).upload(relative, path)


def fetched(root: str, url: str | None, layer: Layer) -> Path:
    """Where a published layer is on this host: in the working folder `root`, downloaded
    from the object store at `url` first when it is not there whole."""
    path = Path(root) / layer.path
    if url is None or layer.sized(path):
        return path
    _store(url).download(layer.path, path)
    with open(path, "rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    if digest != layer.sha256 or path.stat().st_size != layer.size:
        path.unlink(missing_ok=True)
        raise StoreError(f"{url}/{layer.path} is not the layer the manifest names (sha256)")
    return path


@functools.cache
def _store(url: str) -> SnapshotStore:
    """One client per store and process (an executor's tasks share it)."""
    return open_store(url)
