"""The snapshot store: where the pipeline publishes layers and their manifest, and where nodes
fetch them from. Two stores answer the same questions (`SnapshotStore`, snapshot_store/store.py):
a folder on this machine (the embedded default: snapshot_store/folder.py) and a bucket on
the S3 API (`s3://bucket/prefix`: snapshot_store/s3.py), which every host reaches without a
shared disk. A layer never changes at its name; the manifest is replaced by a conditional
write, so that of two pipelines racing to publish one loses cleanly (`Conflict`).
"""

from __future__ import annotations

from pathlib import Path

from contracts.project import OBJECT_STORE
from snapshot_store.store import Conflict as Conflict
from snapshot_store.store import SnapshotStore as SnapshotStore
from snapshot_store.store import Stored as Stored
from snapshot_store.store import StoreError as StoreError

# The standard AWS variables an S3 store reads (snapshot_store/s3.py): what a Spark executor
# is given of its driver's environment.
ENVIRONMENT = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_CA_BUNDLE",
)


def open_store(url: str) -> SnapshotStore:
    """The store at `url`: `s3://bucket/prefix`, or a folder's path."""
    if url.startswith(OBJECT_STORE):
        from snapshot_store.s3 import S3SnapshotStore

        return S3SnapshotStore(url)
    if "://" in url:
        raise ValueError(f"a snapshot store is a folder or s3://bucket/prefix, not {url}")
    from snapshot_store.folder import FolderStore

    return FolderStore(Path(url))
