"""What a snapshot store answers, whichever it is; its errors, translated once by each store
from its own (OSError, the S3 client's)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class StoreError(Exception):
    """The store could not be read or written (unreachable, refused, an object missing)."""


class Missing(StoreError):
    """No object at that name."""


class Conflict(StoreError):
    """A conditional write lost: the object is not the one the writer read (another writer
    replaced it, or created it first)."""


@dataclass(frozen=True)
class Stored:
    name: str  # relative to the store: p3/v12.delta.arrow
    size: int
    modified_s: float  # seconds since the epoch


class SnapshotStore(Protocol):
    url: str  # as the project file names it

    def read(self, name: str) -> tuple[bytes, str] | None:
        """The object and its tag (what a conditional write names), or None when absent."""
        ...

    def replace(self, name: str, data: bytes, tag: str | None) -> str:
        """Write the object whole if it still is the one tagged `tag` (None: if there is
        none); its new tag. Conflict when it is not."""
        ...

    def upload(self, name: str, path: Path) -> None:
        """Store the file at `path` under `name`, visible whole or not at all."""
        ...

    def download(self, name: str, path: Path) -> None:
        """Copy the object to `path` (through a temporary file beside it). Missing when
        absent."""
        ...

    def listing(self, prefix: str) -> list[Stored]:
        """The objects whose names start with `prefix`."""
        ...

    def delete(self, name: str) -> None:
        """Delete the object, if it is there."""
        ...
