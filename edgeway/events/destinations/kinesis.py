"""``data_stream``: Amazon Kinesis Data Streams ``PutRecords`` (at most 500 records and 5 MiB
per call), one record per event: its envelope as JSON text, partitioned by the event's id.
Records Kinesis refuses in a partial failure (throttled shards) are sent again from the first
one refused."""

from __future__ import annotations

from typing import Any

from edgeway.events.destinations import event_id
from edgeway.events.destinations.aws import StreamBatch


class Kinesis(StreamBatch):
    kind = "data_stream"
    max_bytes = 4_500_000
    label, service, operation, method = "Kinesis", "kinesis", "PutRecords", "put_records"
    arn_member, arn_marker, name_member = "stream_arn", "stream/", "StreamName"
    failed_key, results_key = "FailedRecordCount", "Records"

    def record(self, event: str) -> dict[str, Any]:
        return {"Data": event.encode(), "PartitionKey": event_id(event)}
