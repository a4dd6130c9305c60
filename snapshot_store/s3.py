"""A snapshot store in a bucket on the S3 API (AWS S3, or any server that speaks it: S3Proxy,
Ceph's RADOS gateway, MinIO), through obstore (Rust's object_store: one native client, no
botocore). `s3://bucket/prefix` in the project file; where and as whom from the standard AWS
variables, never from the file: AWS_ENDPOINT_URL (absent: AWS itself), AWS_REGION,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (or the other ways object_store finds credentials),
AWS_CA_BUNDLE (a private CA's PEM file, for a store that serves TLS with it).

An upload is visible whole or not at all (S3's PUT, or a multipart upload completed last).
The manifest is replaced with If-Match on the ETag it had when read, created with
If-None-Match: *, so that a writer that lost the race gets Conflict.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    NotFoundError,
    PreconditionError,
)
from obstore.store import S3Store

from contracts.entries import ConfigError
from snapshot_store.store import Conflict, Missing, Stored, StoreError

if TYPE_CHECKING:
    from obstore import PutMode
    from obstore.store import RetryConfig

CHUNK = 8 << 20  # a download's pieces, and an upload's past this size (multipart)
# A call retries a store that does not answer for this long: the pipeline's and the nodes'
# own loops try again after that, and a node's sync must not hang for object_store's 3 min.
RETRY: RetryConfig = {"max_retries": 3, "retry_timeout": timedelta(seconds=10)}
CONNECT_TIMEOUT = timedelta(seconds=3)
TIMEOUT = timedelta(seconds=120)  # a whole request: a layer of a few hundred MB


class S3SnapshotStore:
    def __init__(self, url: str) -> None:
        self.url = url
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not bucket:
            raise ValueError(f"no bucket in {url}: s3://bucket/prefix")
        try:
            self._store = S3Store(
                bucket, prefix=prefix.strip("/") or None, retry_config=RETRY, **_settings()
            )
        except (OSError, ValueError, BaseError) as exc:  # the environment's: a CA bundle
            raise ConfigError(f"the snapshot store {url}: {_said(exc)}") from None

    def read(self, name: str) -> tuple[bytes, str] | None:
        try:
            found = obstore.get(self._store, name)
            return bytes(found.bytes()), found.meta["e_tag"] or ""
        except (NotFoundError, FileNotFoundError):
            return None
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot read {self._where(name)}: {_said(exc)}") from exc

    def replace(self, name: str, data: bytes, tag: str | None) -> str:
        mode: PutMode = "create" if tag is None else {"e_tag": tag}
        try:
            put = obstore.put(self._store, name, data, mode=mode)
        except (AlreadyExistsError, FileExistsError, PreconditionError) as exc:
            raise Conflict(f"{self._where(name)} is not the one read: {_said(exc)}") from exc
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot write {self._where(name)}: {_said(exc)}") from exc
        return put["e_tag"] or ""

    def upload(self, name: str, path: Path) -> None:
        try:
            obstore.put(self._store, name, path, chunk_size=CHUNK)
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot upload {path} to {self._where(name)}: {_said(exc)}") from exc

    def download(self, name: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            found = obstore.get(self._store, name)
            with open(tmp, "wb") as file:
                for chunk in found.stream(min_chunk_size=CHUNK):
                    file.write(chunk)
            os.replace(tmp, path)
        except (NotFoundError, FileNotFoundError) as exc:
            raise Missing(f"no {self._where(name)}") from exc
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot download {self._where(name)}: {_said(exc)}") from exc
        finally:
            tmp.unlink(missing_ok=True)

    def listing(self, prefix: str) -> list[Stored]:
        folder = prefix.rpartition("/")[0] or None
        try:
            return [
                Stored(meta["path"], meta["size"], meta["last_modified"].timestamp())
                for page in obstore.list(self._store, folder)
                for meta in page
                if meta["path"].startswith(prefix)
            ]
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot list {self._where(prefix)}: {_said(exc)}") from exc

    def delete(self, name: str) -> None:
        try:
            obstore.delete(self._store, name)
        except (NotFoundError, FileNotFoundError):
            pass
        except (BaseError, OSError) as exc:
            raise StoreError(f"cannot delete {self._where(name)}: {_said(exc)}") from exc

    def _where(self, name: str) -> str:
        return f"{self.url.rstrip('/')}/{name}"


def _settings() -> dict[str, Any]:
    """What the AWS variables say beyond what object_store reads of them itself: plain HTTP
    for an http:// endpoint, a private CA."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    options: dict[str, Any] = {"connect_timeout": CONNECT_TIMEOUT, "timeout": TIMEOUT}
    if endpoint is not None and endpoint.startswith("http://"):
        options["allow_http"] = True
    bundle = os.environ.get("AWS_CA_BUNDLE")
    if bundle:
        try:
            options["root_certificate"] = Path(bundle).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"AWS_CA_BUNDLE {bundle}: {exc}") from None
    settings: dict[str, Any] = {"client_options": options}
    if endpoint is not None:
        settings["endpoint"] = endpoint
    return settings


def _said(exc: BaseException) -> str:
    """The error's first line: object_store's text goes on with its whole debug source."""
    return str(exc).strip().split("\n", 1)[0]
