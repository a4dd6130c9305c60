"""File-system primitives the log, the snapshot store and the nodes rely on: an exclusive
lock on a folder (waited for, or held for a process's life), a file replaced whole, and fsync
of a folder so a rename survives a crash."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


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


def hold(folder: Path, name: str) -> IO[str] | None:
    """Hold `<folder>/<name>` exclusively until the file returned is closed (or the process
    ends); None, at once, when another process holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / name, "a")  # noqa: SIM115 - the caller keeps it open
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


def replace_whole(path: Path, data: bytes) -> None:
    """Write `data` as `path`, atomically and durably: a reader sees the old file or the new
    one, and a crash after this returns keeps the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
