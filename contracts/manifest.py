"""The manifest: which version of each partition is current, written by the pipeline to the
snapshot store and read by every node.

    {"format": 2,
     "partitions": {"<p>": {"layers": [{"version", "kind", "path", "sha256", "size",
                                        "position": {topic: offset}, "created_ms",
                                        "appended": [[append_ms, records], ...],
                                        "newest_append_ms", "read_ms", "written_ms",
                                        "published_ms", "rows": {store: n},
                                        "traceparent"},
                                       ...]}},
     "log_end": {"<topic>": {"<p>": offset}},
     "stores_digest": "...", "updated_ms": ...,
     "built": {"partitions": n, "stores": {store: rows_as},
               "declarations": {store: declaration}}}

A partition's layers are its chain (contracts/snapshot_file.py): a base, then deltas of
consecutive versions, oldest first. A layer's freshness fields (contracts/freshness.py) are
optional: a manifest written before them reads as "unknown". `built` says which declaration
built each store's rows (contracts/snapshot_file.py: rows_as), so that a change of the
stores builds only what changed (none in a manifest written before it), and that declaration
whole (`declarations`, as a base's `_stores` has it; none in a manifest written before it),
so that a store changed in place is built as a generation beside the old one
(contracts/generations.py). It is replaced atomically
(write_manifest), so a reader sees the old one or the new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson

from contracts.durable import replace_whole
from contracts.freshness import AppendTimes
from contracts.snapshot_file import FORMAT, FormatError, Kind, check_format

FILE_NAME = "manifest.json"
# The newest layers of a chain whose append times the manifest keeps: a node further behind
# than this counts only these layers' records in its freshness histogram.
FRESH_LAYERS = 4
TRACEPARENT_LENGTH = 55  # "00-" 32 hex "-" 16 hex "-" 2 hex


@dataclass(frozen=True)
class Layer:
    version: int
    kind: Kind
    path: str  # relative to the store
    sha256: str
    size: int
    position: dict[str, int]  # topic -> next offset to read
    created_ms: int  # when its file was started (the header's, and the snapshot's age)
    # its new records by append time; kept for a chain's newest FRESH_LAYERS only (to_json)
    appended: AppendTimes = field(default=(), compare=False)
    newest_append_ms: int | None = None  # of the newest record in the state up to it
    read_ms: int | None = None  # when the pipeline read its new records
    published_ms: int | None = None  # when a manifest first named it
    written_ms: int | None = None  # when its file was complete, under its final name
    # store -> its rows in the partition up to this layer, at most: a base's, plus each
    # delta's (a key a later delta changes again counts twice, until a compaction)
    rows: dict[str, int] = field(default_factory=dict, compare=False)
    # its publication's span, when the pipeline traced it (contracts/tracing.py): W3C form
    traceparent: str | None = field(default=None, compare=False)

    def sized(self, path: Path) -> bool:
        """Whether the file at `path` has this layer's size (its sha256 is checked apart)."""
        try:
            return path.stat().st_size == self.size
        except OSError:
            return False

    def stages(self) -> dict[str, int | None]:
        """When its new records reached each of the pipeline's stages (STAGES)."""
        return {"read": self.read_ms, "written": self.written_ms, "published": self.published_ms}


@dataclass(frozen=True)
class PartitionEntry:
    layers: tuple[Layer, ...]  # a base, then deltas of consecutive versions

    def __post_init__(self) -> None:
        base, *deltas = self.layers
        kinds_ok = base.kind == "base" and all(d.kind == "delta" for d in deltas)
        versions = [layer.version for layer in self.layers]
        if not kinds_ok or versions != list(range(base.version, base.version + len(versions))):
            raise FormatError(
                f"not a chain of layers: {[(x.kind, x.version) for x in self.layers]}"
            )

    @property
    def base(self) -> Layer:
        return self.layers[0]

    @property
    def top(self) -> Layer:
        return self.layers[-1]

    @property
    def version(self) -> int:
        return self.top.version

    @property
    def position(self) -> dict[str, int]:
        return self.top.position

    @property
    def created_ms(self) -> int:
        return self.top.created_ms


@dataclass(frozen=True)
class Built:
    """What the chains were built by: the partition count, and each store's declaration."""

    partitions: int
    stores: dict[str, str]  # store -> rows_as of its declaration
    declarations: dict[str, str] = field(default_factory=dict)  # store -> snapshot_file.declaration

    def changed(self, now: Built) -> frozenset[str]:
        """The stores of `now` whose state these chains do not hold: new or declared
        otherwise (every one when the partitions changed)."""
        if now.partitions != self.partitions:
            return frozenset(now.stores)
        return frozenset(s for s, digest in now.stores.items() if self.stores.get(s) != digest)


@dataclass(frozen=True)
class Manifest:
    partitions: dict[int, PartitionEntry] = field(default_factory=dict)
    log_end: dict[str, dict[int, int]] = field(default_factory=dict)  # what the pipeline saw
    stores_digest: str | None = None
    updated_ms: int = 0
    built: Built | None = None  # None: written before it

    @cached_property
    def store_rows(self) -> dict[str, int]:
        """Each store's rows in every partition, as the chains' newest layers bound them: the
        same figures on every node that read this manifest (none before any was published)."""
        found: dict[str, int] = {}
        for entry in self.partitions.values():
            for store, count in entry.top.rows.items():
                found[store] = found.get(store, 0) + count
        return found

    def to_json(self) -> bytes:
        body = {
            "format": FORMAT,
            "partitions": {
                str(p): {"layers": [_stored(layer, e.version) for layer in e.layers]}
                for p, e in sorted(self.partitions.items())
            },
            "log_end": {
                t: {str(p): o for p, o in ends.items()} for t, ends in self.log_end.items()
            },
            "stores_digest": self.stores_digest,
            "updated_ms": self.updated_ms,
        }
        if self.built is not None:
            body["built"] = vars(self.built)
        return orjson.dumps(body, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)

    @classmethod
    def from_json(cls, raw: bytes) -> Manifest:
        """Parse and check a manifest; FormatError when it is not one this version reads."""
        try:
            body = orjson.loads(raw)
            if not isinstance(body, dict):
                raise FormatError("the manifest is not a JSON object")
            check_format(body.get("format"), "the manifest")
            return cls(
                partitions={int(p): _entry(e) for p, e in body["partitions"].items()},
                log_end={
                    str(t): {int(p): int(o) for p, o in ends.items()}
                    for t, ends in body["log_end"].items()
                },
                stores_digest=body.get("stores_digest"),
                updated_ms=int(body.get("updated_ms", 0)),
                built=parse_built(body.get("built")),
            )
        except FormatError:
            raise
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"the manifest is malformed: {exc!r}") from exc


def _stored(layer: Layer, newest: int) -> dict[str, Any]:
    """A layer as the manifest holds it: append times only for the chain's newest
    FRESH_LAYERS (those a node may be about to install), so the manifest every node reads at
    every sync does not grow by 64 pairs per layer of a chain."""
    body = vars(layer)
    if layer.version <= newest - FRESH_LAYERS:
        body = {**body, "appended": ()}
    if layer.traceparent is None:  # untraced (nearly always): not written at all
        body = {k: v for k, v in body.items() if k != "traceparent"}
    return body


def parse_built(raw: Any) -> Built | None:
    """A Built from its JSON form (`vars(built)`); None for none."""
    if raw is None:
        return None
    stores = {str(store): str(digest) for store, digest in raw["stores"].items()}
    declarations = {str(s): str(text) for s, text in raw.get("declarations", {}).items()}
    return Built(int(raw["partitions"]), stores, declarations)


def _entry(raw: dict[str, Any]) -> PartitionEntry:
    return PartitionEntry(tuple(parse_layer(layer) for layer in raw["layers"]))


def parse_layer(raw: dict[str, Any]) -> Layer:
    """A layer from its JSON form (`vars(layer)`); FormatError for an unknown kind."""
    kind = raw["kind"]
    if kind not in ("base", "delta"):
        raise FormatError(f"a layer of kind {kind!r}")
    return Layer(
        version=int(raw["version"]),
        kind=kind,
        path=str(raw["path"]),
        sha256=str(raw["sha256"]),
        size=int(raw["size"]),
        position={str(t): int(o) for t, o in raw["position"].items()},
        created_ms=int(raw["created_ms"]),
        appended=tuple((int(ms), int(n)) for ms, n in raw.get("appended", ())),
        newest_append_ms=_optional(raw.get("newest_append_ms")),
        read_ms=_optional(raw.get("read_ms")),
        published_ms=_optional(raw.get("published_ms")),
        written_ms=_optional(raw.get("written_ms")),
        rows={str(store): int(n) for store, n in raw.get("rows", {}).items()},
        traceparent=_traceparent(raw.get("traceparent")),
    )


def _traceparent(value: Any) -> str | None:
    return value if isinstance(value, str) and len(value) <= TRACEPARENT_LENGTH else None


def _optional(value: Any) -> int | None:
    return None if value is None else int(value)


def read_manifest(store_dir: Path) -> Manifest:
    """The store's manifest; an empty one when nothing was published yet."""
    try:
        return Manifest.from_json((store_dir / FILE_NAME).read_bytes())
    except FileNotFoundError:
        return Manifest()


def write_manifest(store_dir: Path, manifest: Manifest) -> None:
    """Replace the manifest atomically: readers see the old one or the new one."""
    store_dir.mkdir(parents=True, exist_ok=True)
    replace_whole(store_dir / FILE_NAME, manifest.to_json())
