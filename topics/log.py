"""The seam of the log the pipeline follows: what every log answers (`Log`), and the one
error it raises (`TopicsError`, which the CLI prints as one line)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import pyarrow as pa

from contracts.project import Topic
from contracts.records import Record
from topics.batches import Span


class TopicsError(Exception):
    """The log, or a topic in it, is not what the project declares or cannot be reached:
    one line that says which and how."""


class LogUnavailable(TopicsError):
    """The log cannot be read now (its brokers unreachable, a partition without a leader):
    a following pipeline waits and reads again; a run that starts refuses in one line."""


class Log(Protocol):
    where: str  # the log, as a message names it: "Kafka at host:port", "the file log <dir>"

    def check(self) -> None:
        """Every declared topic is there as declared (else one line saying what differs):
        at start, and while following (partitions added would map keys elsewhere)."""
        ...

    def end_offsets(self) -> dict[str, dict[int, int]]:
        """Each declared topic's partitions' next offsets (declared names, every partition)."""
        ...

    def end_offset(self, topic: str, partition: int) -> int:
        """One partition's next offset."""
        ...

    def read(self, spans: Sequence[Span]) -> Iterator[pa.RecordBatch]:
        """The records of each span, [start, end) of one topic partition, as RECORDS (from
        any thread: each reads with its own reader)."""
        ...

    def published(self, positions: dict[str, dict[int, int]]) -> None:
        """Tell the log how far the state is published, per topic and partition (Kafka: the
        consumer group's committed offsets, the lag its tools show). Only a mirror: the
        manifest stays the one record of what is published."""
        ...

    def append(self, topic: Topic, records: Iterable[Record]) -> dict[int, int]:
        """Records that fit the declared topic (BadRecord otherwise, before any is written),
        routed by Kafka's default partitioner; returns the count per partition."""
        ...

    def close(self) -> None: ...
