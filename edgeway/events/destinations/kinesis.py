"""``data_stream``: Amazon Kinesis Data Streams ``PutRecords`` (at most 500 records and 5 MiB
per call), one record per event: its envelope as JSON text, partitioned by the event's id.
Records Kinesis refuses in a partial failure (throttled shards) are sent again from the first
one refused."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from edgeway.events.destinations import Clients, DeliveryError, call, event_id
from edgeway.events.destinations.aws import Access, arn_parts, failure


class Kinesis:
    kind = "data_stream"
    max_batch = 500
    max_bytes = 4_500_000

    def __init__(self, body: dict[str, Any], secret: Callable[[str], str],
                 clients: Clients) -> None:
        region, self.name = arn_parts(body["stream_arn"], "stream/")
        self.access = Access(body["auth"], secret, region, clients)

    def _put(self, events: Sequence[str]) -> dict[str, Any]:
        answer: dict[str, Any] = self.access.client("kinesis").put_records(
            StreamName=self.name,
            Records=[{"Data": e.encode(), "PartitionKey": event_id(e)} for e in events])
        return answer

    async def send(self, events: Sequence[str]) -> str:
        try:
            answer = await call(self._put, events)
        except Exception as exc:
            raise failure("Kinesis", exc) from None
        failed = int(answer.get("FailedRecordCount", 0))
        if failed:
            results = answer.get("Records", [])
            first = next(i for i, r in enumerate(results) if r.get("ErrorCode"))
            raise DeliveryError(f"Kinesis refused {failed} of {len(events)} records: "
                                f"{results[first].get('ErrorCode')}: "
                                f"{results[first].get('ErrorMessage', '')}", accepted=first)
        return f"PutRecords: {len(events)} records, FailedRecordCount 0"
