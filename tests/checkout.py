"""What tests share in the checkout itself: the TypeScript client's generated/ and dist/
folders, written by `make client-typescript` and `npm run build` from both
tests/test_clients.py and the README's examples (tests/test_readme.py), which xdist may run
at once on two workers. Each holds the folder's lock while it builds and reads them."""

from __future__ import annotations

import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TYPESCRIPT = ROOT / "clients" / "typescript"


@contextmanager
def typescript_client() -> Iterator[None]:
    """The TypeScript client's folder to this process alone until the block ends."""
    digest = hashlib.sha256(str(TYPESCRIPT).encode()).hexdigest()[:12]
    with open(Path(tempfile.gettempdir()) / f"stategate-typescript-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield
