"""``delivery_stream``: Amazon Data Firehose ``PutRecordBatch`` (at most 500 records and 4 MiB
per call), one record per event: its envelope as JSON text and a newline, so the objects
Firehose writes hold one event per line. Records Firehose refuses in a partial failure are
sent again from the first one refused (those before it arrived)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from edgeway.events.destinations import Clients, DeliveryError, call
from edgeway.events.destinations.aws import Access, arn_parts, failure


class Firehose:
    kind = "delivery_stream"
    max_batch = 500
    max_bytes = 3_500_000

    def __init__(self, body: dict[str, Any], secret: Callable[[str], str],
                 clients: Clients) -> None:
        region, self.name = arn_parts(body["delivery_stream_arn"], "deliverystream/")
        self.access = Access(body["auth"], secret, region, clients)

    def _put(self, events: Sequence[str]) -> dict[str, Any]:
        answer: dict[str, Any] = self.access.client("firehose").put_record_batch(
            DeliveryStreamName=self.name,
            Records=[{"Data": e.encode() + b"\n"} for e in events])
        return answer

    async def send(self, events: Sequence[str]) -> str:
        try:
            answer = await call(self._put, events)
        except Exception as exc:
            raise failure("Firehose", exc) from None
        failed = int(answer.get("FailedPutCount", 0))
        if failed:
            results = answer.get("RequestResponses", [])
            first = next(i for i, r in enumerate(results) if r.get("ErrorCode"))
            raise DeliveryError(f"Firehose refused {failed} of {len(events)} records: "
                                f"{results[first].get('ErrorCode')}: "
                                f"{results[first].get('ErrorMessage', '')}", accepted=first)
        return f"PutRecordBatch: {len(events)} records, FailedPutCount 0"
