"""``log_group``: Amazon CloudWatch Logs ``PutLogEvents`` into the stream ``edgeway-events``
of the destination's log group, created when missing (the group must exist). One log event
per event: its envelope as the message, its time as the timestamp (never earlier than the one
before it, as CloudWatch wants a batch in time order: events keep their order). At most
10,000 events and 1 MiB per call, counting 26 bytes per event as CloudWatch does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from edgeway.events.destinations import Clients, call, event_timestamp
from edgeway.events.destinations.aws import Access, arn_parts, failure

STREAM = "edgeway-events"


def _millis(body: str) -> int:
    stamp = event_timestamp(body).replace("Z", "+00:00")
    return int(datetime.fromisoformat(stamp).timestamp() * 1000)


class CloudWatchLogs:
    kind = "log_group"
    max_batch = 5000
    max_bytes = 900_000

    def __init__(self, body: dict[str, Any], secret: Callable[[str], str],
                 clients: Clients) -> None:
        region, self.group = arn_parts(body["log_group_arn"], "log-group:")
        self.access = Access(body["auth"], secret, region, clients)

    def _put(self, events: Sequence[str]) -> None:
        from botocore.exceptions import ClientError

        logs = self.access.client("logs")
        batch, last = [], 0
        for e in events:
            last = max(last, _millis(e))
            batch.append({"timestamp": last, "message": e})
        try:
            logs.put_log_events(logGroupName=self.group, logStreamName=STREAM, logEvents=batch)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException" \
                    or "stream" not in str(exc).lower():
                raise
            try:
                logs.create_log_stream(logGroupName=self.group, logStreamName=STREAM)
            except ClientError as again:
                if again.response.get("Error", {}).get("Code") != \
                        "ResourceAlreadyExistsException":
                    raise
            logs.put_log_events(logGroupName=self.group, logStreamName=STREAM, logEvents=batch)

    async def send(self, events: Sequence[str]) -> str:
        try:
            await call(self._put, events)
        except Exception as exc:
            raise failure("CloudWatch Logs", exc) from None
        return f"PutLogEvents: {len(events)} events into {self.group}/{STREAM}"
