"""A snapshot store in a folder of this machine: the embedded default. Its manifest is
replaced by rename under a lock of its own (contracts/durable.py; the pipeline holds the
folder's while it publishes), checked against the tag of the file it replaces (its inode and
mtime: every rename makes a new one)."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from contracts.durable import locked, replace_whole
from snapshot_store.store import Conflict, Missing, Stored, StoreError

REPLACE_LOCK = ".replace.lock"


class FolderStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = str(root)

    def read(self, name: str) -> tuple[bytes, str] | None:
        path = self.root / name
        try:
            with open(path, "rb") as file:
                return file.read(), _tag(os.fstat(file.fileno()))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc

    def replace(self, name: str, data: bytes, tag: str | None) -> str:
        path = self.root / name
        try:
            with locked(self.root, REPLACE_LOCK):
                current = _current_tag(path)
                if current != tag:
                    raise Conflict(f"{path} is not the one read ({current} is, {tag} was)")
                replace_whole(path, data)
                return _tag(path.stat())
        except OSError as exc:
            raise StoreError(f"cannot write {path}: {exc}") from exc

    def upload(self, name: str, path: Path) -> None:
        target = self.root / name
        if target.resolve() == path.resolve():
            return  # written in place: the pipeline's working folder is this store
        self._copy(path, target)

    def download(self, name: str, path: Path) -> None:
        source = self.root / name
        if not source.is_file():
            raise Missing(f"no {name} in {self.root}")
        self._copy(source, path)

    def listing(self, prefix: str) -> list[Stored]:
        folder, _, start = prefix.rpartition("/")
        found = []
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for entry in os.scandir(self.root / folder):
                if entry.is_file() and entry.name.startswith(start):
                    stat = entry.stat()
                    name = f"{folder}/{entry.name}" if folder else entry.name
                    found.append(Stored(name, stat.st_size, stat.st_mtime))
        return found

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)

    @staticmethod
    def _copy(source: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            shutil.copyfile(source, tmp)
            os.replace(tmp, target)
        except OSError as exc:
            raise StoreError(f"cannot copy {source} to {target}: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)


def _current_tag(path: Path) -> str | None:
    try:
        return _tag(path.stat())
    except FileNotFoundError:
        return None


def _tag(stat: os.stat_result) -> str:
    return f"{stat.st_ino}-{stat.st_mtime_ns}-{stat.st_size}"
