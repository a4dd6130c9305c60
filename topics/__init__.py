"""The log the pipeline follows: the declared topics' records, read by offset range, and their
end offsets. Two logs answer the same questions (`Log`, topics/log.py): Apache Kafka, where the
users' events live ([kafka] in the project file: topics/kafka.py), and the file log of
Parquet segments ([log]: topics/files.py, contracts/eventlog.py).

Records come as Arrow batches of RECORDS (topics/batches.py), the one shape the pipeline's
builds read whichever the log: topic, partition, offset, timestamp (event time), the key as
text, the value as JSON text (null: a tombstone), and append_ms (when the log appended it;
null when unknown).
"""

from __future__ import annotations

from contracts.project import Project
from topics.log import Log as Log
from topics.log import LogUnavailable as LogUnavailable
from topics.log import TopicsError as TopicsError


def open_log(project: Project) -> Log:
    """The project's log: its Kafka cluster, or its file log."""
    if project.kafka is not None:
        from topics.kafka import KafkaLog

        key_types = {name: topic.key_type for name, topic in project.topics.items()}
        return KafkaLog(project.kafka, project.cluster.partitions, key_types)
    from topics.files import FileLog

    return FileLog(project)
