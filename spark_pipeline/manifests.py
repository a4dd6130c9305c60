"""The manifest as the pipeline reads and replaces it, in the snapshot store: its folder, or
the object store the project names (snapshot_store/). Each write names the manifest it
read, so that of two pipelines publishing to one store the one that read an older manifest
loses cleanly (ManifestConflict) instead of hiding the other's layers. With an object store
the folder keeps a copy of the manifest written last, for the tools that read it there.
"""

from __future__ import annotations

from pathlib import Path

from contracts.manifest import FILE_NAME, Manifest, write_manifest
from contracts.project import Project
from snapshot_store import Conflict, SnapshotStore, open_store
from snapshot_store.folder import FolderStore


class ManifestConflict(Exception):
    """Another pipeline published to the store since this one read the manifest."""


class Manifests:
    def __init__(self, project: Project, folder: Path) -> None:
        self.folder = folder
        url = project.object_store
        self.object_store: SnapshotStore | None = None if url is None else open_store(url)
        self.store: SnapshotStore = self.object_store or FolderStore(folder)
        self._tag: str | None = None  # of the manifest read or written last

    def read(self) -> Manifest:
        """The published manifest (empty before the first publication), to be replaced
        next: the caller holds the folder's lock until it writes."""
        found = self.store.read(FILE_NAME)
        self._tag = None if found is None else found[1]
        return Manifest() if found is None else Manifest.from_json(found[0])

    def current(self) -> Manifest:
        """The published manifest, to look at."""
        found = self.store.read(FILE_NAME)
        return Manifest() if found is None else Manifest.from_json(found[0])

    def write(self, manifest: Manifest) -> None:
        """Replace the manifest this pipeline read or wrote last. ManifestConflict when
        another pipeline replaced it meanwhile; StoreError when the store cannot be written
        (nothing was published: the layers wait, unnamed, for the next attempt)."""
        try:
            self._tag = self.store.replace(FILE_NAME, manifest.to_json(), self._tag)
        except Conflict as exc:
            raise ManifestConflict(
                f"another pipeline published to {self.store.url} since this one read its "
                f"manifest: {exc}"
            ) from exc
        if self.object_store is not None:
            write_manifest(self.folder, manifest)
