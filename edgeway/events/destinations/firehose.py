"""``delivery_stream``: Amazon Data Firehose ``PutRecordBatch`` (at most 500 records and 4 MiB
per call), one record per event: its envelope as JSON text and a newline, so the objects
Firehose writes hold one event per line. Records Firehose refuses in a partial failure are
sent again from the first one refused (those before it arrived)."""

from __future__ import annotations

from typing import Any

from edgeway.events.destinations.aws import StreamBatch


class Firehose(StreamBatch):
    kind = "delivery_stream"
    max_bytes = 3_500_000
    label, service, operation, method = "Firehose", "firehose", "PutRecordBatch", \
        "put_record_batch"
    arn_member, arn_marker, name_member = "delivery_stream_arn", "deliverystream/", \
        "DeliveryStreamName"
    failed_key, results_key = "FailedPutCount", "RequestResponses"

    def record(self, event: str) -> dict[str, Any]:
        return {"Data": event.encode() + b"\n"}
