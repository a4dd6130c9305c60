"""The file log (contracts/eventlog.py) as a Log: its segments read straight with pyarrow."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from contracts import eventlog
from contracts.project import Project, Topic
from contracts.records import Record
from topics.batches import RECORDS, Span, readable
from topics.log import TopicsError


class FileLog:
    def __init__(self, project: Project) -> None:
        self.log_dir = project.log_dir
        self.where = f"the file log {project.log_dir}"
        self.topics = sorted(project.topics)
        self.partitions = project.cluster.partitions

    def check(self) -> None:
        """Every topic's records routed by the declared partition count (as its producers
        wrote it down, and no partition folder past it); else TopicsError naming the topics
        that differ: a file log cannot be repartitioned in place."""
        try:
            wrong = [
                f"{topic!r} {differs}"
                for topic in self.topics
                if (differs := eventlog.routing_differs(self.log_dir, topic, self.partitions))
            ]
        except eventlog.PartitionsDiffer as exc:  # a count written down that holds none
            raise TopicsError(str(exc)) from None
        if wrong:
            raise TopicsError(
                f"{self.where} differs from the project, which declares {self.partitions} "
                f"partitions: {'; '.join(wrong)} (set partitions back, or produce the records "
                "again into a new log and delete the snapshot store to rebuild)"
            )

    def end_offsets(self) -> dict[str, dict[int, int]]:
        return {
            topic: {p: eventlog.end_offset(self.log_dir, topic, p) for p in range(self.partitions)}
            for topic in self.topics
        }

    def end_offset(self, topic: str, partition: int) -> int:
        return eventlog.end_offset(self.log_dir, topic, partition)

    def read(self, spans: Sequence[Span]) -> Iterator[pa.RecordBatch]:
        return read_spans(self.log_dir, spans)

    def published(self, positions: dict[str, dict[int, int]]) -> None:
        pass  # no tool reads a file log's progress

    def append(self, topic: Topic, records: Iterable[Record]) -> dict[int, int]:
        """Produce the records (eventlog.produce); TopicsError when the topic was written
        with another partition count, before any is appended."""
        try:
            return eventlog.produce(self.log_dir, topic, self.partitions, records)
        except eventlog.PartitionsDiffer as exc:
            raise TopicsError(str(exc)) from None

    def close(self) -> None:
        pass


def read_spans(log_dir: Path, spans: Sequence[Span]) -> Iterator[pa.RecordBatch]:
    """The spans' records, one Arrow batch per segment, with the key as text. The file log's
    offsets are dense: a span whose records start past its start is refused (the snapshots
    were built from another log, or segments were deleted)."""
    for partition, topic, start, end in spans:
        first = True
        for path in eventlog.segments_from(log_dir, topic, partition, start):
            table = eventlog.read_segment(path)
            offsets = table.column("offset")
            table = table.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))
            if table.num_rows == 0:
                continue
            if first and (found := table.column("offset")[0].as_py()) != start:
                raise TopicsError(
                    f"{topic}-{partition}: the file log's records start at offset {found}, "
                    f"the snapshots are at {start}: they were built from another log"
                )
            first = False
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([topic] * table.num_rows, pa.string()),
                    pa.array([partition] * table.num_rows, pa.int32()),
                    table.column("offset").combine_chunks(),
                    table.column("timestamp").combine_chunks(),
                    table.column("key").cast(pa.string()).combine_chunks(),
                    readable(table.column("value").combine_chunks()),
                    eventlog.append_times(table),
                ],
                schema=RECORDS,
            )
