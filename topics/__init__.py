"""The log the pipeline follows: the declared topics' records, read by offset range, and their
end offsets. Two logs answer the same three questions (`Log`): Apache Kafka, where the
users' events live ([kafka] in the project file: topics/kafka.py), and the file log of
Parquet segments ([log]: topics/files.py, contracts/eventlog.py).

Records come as Arrow batches of RECORDS (topics/records.py), the one shape the pipeline's
builds read whichever the log: topic, partition, offset, timestamp (event time), the key as
text, the value as JSON text (null: a tombstone), and append_ms (when the log appended it;
null when unknown).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import pyarrow as pa

from contracts.project import Project, Topic
from contracts.records import Record
from topics.errors import TopicsError as TopicsError
from topics.records import Span


class Log(Protocol):
    def check(self) -> None:
        """Every declared topic is there as declared (else one line saying what differs)."""
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


def open_log(project: Project) -> Log:
    """The project's log: its Kafka cluster, or its file log."""
    if project.kafka is not None:
        from topics.kafka import KafkaLog

        key_types = {name: topic.key_type for name, topic in project.topics.items()}
        return KafkaLog(project.kafka, project.cluster.partitions, key_types)
    from topics.files import FileLog

    return FileLog(project)
