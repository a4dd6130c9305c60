"""A base's in-memory tables (lookup tables, columns, key runs), written once to a file that
every worker of the node maps: one copy of the state in the page cache, whatever the number
of processes reading it (README: Workers).

The file is a pickle (protocol 5) whose numpy and Arrow buffers are kept out of band: a
header, the pickle's small frame (the Python objects), then each buffer 64-byte aligned.
Loading maps the file read-only and hands pickle views of it, so the arrays are the mapped
pages themselves, not copies. A pickle names its classes by module and holds their fields as
they were: the header carries a stamp of the code that wrote it (the in-memory engine's
source, gateway/storage/memory/), and an image another release wrote (an upgrade, a class
moved or changed) is an ImageError, so the base is read again and its image written anew.
A map outlives the file's name: a worker keeps reading an image the keeper deleted, until
it lets go of the base. Images are written by the node's keeper into its own data
directory, and read by its own workers only.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import os
import pickle
import struct
from pathlib import Path
from typing import Any

MAGIC = b"SGIMAGE2"
ALIGN = 64
_HEADER = struct.Struct("<8s8sQQ")  # magic, the writer's stamp, frame length, buffer count
ENGINE = Path(__file__).resolve().parents[1] / "memory"  # whose classes an image pickles
_BUFFER = struct.Struct("<QQ")  # offset, length


class ImageError(Exception):
    """A file that is not an image this node can read."""


def save(value: Any, path: Path) -> None:
    """Write `value`'s image at `path` (whole or not at all: written aside, then renamed)."""
    buffers: list[pickle.PickleBuffer] = []
    frame = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    views = [buffer.raw() for buffer in buffers]
    table_end = _HEADER.size + _BUFFER.size * len(views)
    offset = _aligned(table_end + len(frame))
    places = []
    for view in views:
        places.append((offset, view.nbytes))
        offset = _aligned(offset + view.nbytes)
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        with open(aside, "wb") as out:
            out.write(_HEADER.pack(MAGIC, stamp(), len(frame), len(views)))
            out.writelines(_BUFFER.pack(*place) for place in places)
            out.write(frame)
            for (at, _), view in zip(places, views, strict=True):
                out.seek(at)
                out.write(view)
        os.replace(aside, path)
    finally:
        aside.unlink(missing_ok=True)


def load(path: Path) -> Any:
    """The value whose image is at `path`, its arrays over the file's mapped pages;
    FileNotFoundError when there is none, ImageError when it is not one."""
    with open(path, "rb") as source:
        try:
            mapped = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as exc:  # an empty file
            raise ImageError(f"{path.name}: {exc}") from exc
    view = memoryview(mapped)
    try:
        magic, written_by, frame_length, count = _HEADER.unpack_from(view)
        if magic != MAGIC:
            raise ImageError(f"{path.name} is not an image")
        if written_by != stamp():
            raise ImageError(f"{path.name} was written by another release")
        places = [_BUFFER.unpack_from(view, _HEADER.size + i * _BUFFER.size) for i in range(count)]
        start = _HEADER.size + _BUFFER.size * count
        frame = view[start : start + frame_length]
        return pickle.loads(frame, buffers=[view[at : at + length] for at, length in places])
    except (struct.error, pickle.UnpicklingError, EOFError, ImportError, AttributeError) as exc:
        raise ImageError(f"{path.name}: {exc}") from exc


@functools.cache
def stamp() -> bytes:
    """What this release's images are stamped with: a digest of the in-memory engine's
    source and of this module."""
    digest = hashlib.sha256()
    for source in sorted([*ENGINE.glob("*.py"), Path(__file__).resolve()]):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.digest()[:8]


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN
