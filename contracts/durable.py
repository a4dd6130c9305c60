"""File-system primitives the log and the snapshot store rely on: an exclusive lock on a
folder, and fsync of a folder so a rename survives a crash."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def locked(folder: Path, name: str = ".lock") -> Iterator[None]:
    """Hold `<folder>/<name>` exclusively (one writer at a time, across processes; a
    process that holds it already waits too: flock's locks are its open files')."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
