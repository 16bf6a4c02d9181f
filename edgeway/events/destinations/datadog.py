"""``monitoring``: the Datadog logs intake. One ``POST <intake>/api/v2/logs`` per batch, with
the ``DD-API-KEY`` header and a gzipped JSON array of log entries (at most 1,000 entries and
5 MB uncompressed, as Datadog documents); each entry is ``{"ddsource": "edgeway", "ddtags":
<the destination's tags>, "hostname": <the node>, "service": <its service, default edgeway>,
"message": <the event type>, "event": <the envelope>}``, so the event's members are the log's
attributes (``@event.object.http.response.status_code``). The intake is
``https://http-intake.logs.<site>`` (site ``datadoghq.com`` unless set), or the server's
``--events-datadog-url``. Datadog answers 202; 400, 401, 403 and 413 are permanent failures.
The payload is written and compressed a slice at a time (``gzipped``): every request's event
may come here, and its cost is the traffic's."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import msgspec

from edgeway.events.destinations import (
    SLICE,
    TYPE_AT,
    Clients,
    DeliveryError,
    call,
    event_type,
    gzipped,
)

PERMANENT = (400, 401, 403, 404, 413)


def answer_text(r: httpx.Response) -> str:
    return f"{r.status_code} {r.reason_phrase}: {r.text[:300].strip()}".rstrip(": ")


class Datadog:
    kind = "monitoring"
    max_batch = 1000
    max_bytes = 4_000_000

    def __init__(self, body: dict[str, Any], secret: Callable[[str], str],
                 clients: Clients) -> None:
        base = clients.options.datadog_url or \
            f"https://http-intake.logs.{body.get('site') or 'datadoghq.com'}"
        self.url = base.rstrip("/") + "/api/v2/logs"
        self.api_key = secret(body["api_key"])
        self.tags, self.service = body.get("tags") or "", body.get("service") or "edgeway"
        self.clients = clients
        # each entry's members but the event (the envelope's JSON text is spliced in as it is)
        head = msgspec.json.encode({"ddsource": "edgeway", "ddtags": self.tags,
                                    "hostname": clients.node, "service": self.service})
        self._head = head.decode()[:-1] + ","

    async def send(self, events: Sequence[str]) -> str:
        return await call(self._send, events)

    def _texts(self, events: Sequence[str]) -> Iterator[str]:
        """The batch's log entries as a JSON array, ``SLICE`` events at a time (events of one
        type, the common case, joined in one step)."""
        head, kind = self._head, event_type(events[0])
        typed = f'{kind}"'
        if all(e.startswith(typed, TYPE_AT) for e in events):
            entry = f'{head}"message":"{kind}","event":'
            sep = f"}},{entry}"
            for i in range(0, len(events), SLICE):
                yield f"{sep if i else '[' + entry}{sep.join(events[i:i + SLICE])}"
            yield "}]"
            return
        for i in range(0, len(events), SLICE):
            text = ",".join(f'{head}"message":"{event_type(e)}","event":{e}}}'
                            for e in events[i:i + SLICE])
            yield f"{',' if i else '['}{text}"
        yield "]"

    def _send(self, events: Sequence[str]) -> str:
        payload = gzipped(self._texts(events))
        try:
            r = self.clients.http().post(self.url, content=payload, headers={
                "DD-API-KEY": self.api_key, "Content-Type": "application/json",
                "Content-Encoding": "gzip"})
        except httpx.HTTPError as exc:
            raise DeliveryError(f"Datadog intake {self.url} unreachable: "
                                f"{type(exc).__name__}: {exc}") from None
        if 200 <= r.status_code < 300:
            return answer_text(r)
        raise DeliveryError(f"Datadog answered {answer_text(r)}",
                            permanent=r.status_code in PERMANENT)
