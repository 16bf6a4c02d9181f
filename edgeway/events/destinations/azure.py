"""``cloud_logs_ingestion``: Azure Monitor Logs Ingestion. A token from the tenant (OAuth 2
client credentials: ``POST <login>/<tenant_id>/oauth2/v2.0/token`` with the client id and
secret, scope ``https://monitor.azure.com/.default``), kept until a minute before it expires;
then one ``POST <logs_ingestion_uri>/dataCollectionRules/<data_collection_rule_id>/streams/
<data_collection_stream_name>?api-version=2023-01-01`` per batch with ``Authorization: Bearer``
and a gzipped JSON array (at most 1 MB), one record per event: ``TimeGenerated`` (the event's
time) and the envelope's members (``event_id``, ``event_type``, ``event_timestamp``,
``actor``, ``object``), the columns the stream must declare. Azure answers 204. A refused
token (bad tenant, client or secret) and 401/403/404/413 answers are permanent failures.
``--events-azure-login-url`` and ``--events-azure-ingestion-url`` replace the two bases.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from edgeway.events.destinations import (
    SLICE,
    Clients,
    DeliveryError,
    call,
    event_timestamp,
    gzipped,
)
from edgeway.events.destinations.datadog import answer_text

SCOPE = "https://monitor.azure.com/.default"
API_VERSION = "2023-01-01"
PERMANENT = (400, 401, 403, 404, 413)


class AzureLogs:
    kind = "cloud_logs_ingestion"
    max_batch = 1000
    max_bytes = 900_000

    def __init__(self, body: dict[str, Any], secret: Callable[[str], str],
                 clients: Clients) -> None:
        opts = clients.options
        self.token_url = (f"{opts.azure_login_url.rstrip('/')}/{quote(body['tenant_id'])}"
                          "/oauth2/v2.0/token")
        base = (opts.azure_ingestion_url or body["logs_ingestion_uri"]).rstrip("/")
        self.url = (f"{base}/dataCollectionRules/{quote(body['data_collection_rule_id'])}"
                    f"/streams/{quote(body['data_collection_stream_name'])}"
                    f"?api-version={API_VERSION}")
        self.client_id, self.secret = body["client_id"], secret(body["client_secret"])
        self.clients = clients
        self._token, self._expires = "", 0.0
        self._lock = threading.Lock()

    def _bearer(self) -> str:
        with self._lock:
            if self._token and time.monotonic() < self._expires:
                return self._token
            return self._fetch_token()

    def _fetch_token(self) -> str:
        try:
            r = self.clients.http().post(self.token_url, data={
                "grant_type": "client_credentials", "client_id": self.client_id,
                "client_secret": self.secret, "scope": SCOPE})
        except httpx.HTTPError as exc:
            raise DeliveryError(f"Azure token endpoint unreachable: {type(exc).__name__}: "
                                f"{exc}") from None
        if r.status_code != 200:
            raise DeliveryError(f"Azure refused the client credentials: {answer_text(r)}",
                                permanent=r.status_code in (400, 401, 403))
        try:
            answer = r.json()
            self._token = str(answer["access_token"])
            lifetime = float(answer.get("expires_in", 3600))
        except (ValueError, KeyError, TypeError):
            raise DeliveryError(f"Azure's token answer has no access_token: "
                                f"{r.text[:200]}") from None
        self._expires = time.monotonic() + max(0.0, lifetime - 60)
        return self._token

    async def send(self, events: Sequence[str]) -> str:
        return await call(self._send, events)

    def _send(self, events: Sequence[str]) -> str:
        payload = gzipped(_texts(events))
        token = self._bearer()
        try:
            r = self.clients.http().post(self.url, content=payload, headers={
                "Authorization": f"Bearer {token}", "Content-Type": "application/json",
                "Content-Encoding": "gzip"})
        except httpx.HTTPError as exc:
            raise DeliveryError(f"Azure ingestion endpoint unreachable: "
                                f"{type(exc).__name__}: {exc}") from None
        if r.status_code in (401, 403):
            self._token = ""  # perhaps revoked: a new one next time
        if 200 <= r.status_code < 300:
            return answer_text(r)
        raise DeliveryError(f"Azure Monitor answered {answer_text(r)}",
                            permanent=r.status_code in PERMANENT)


def _texts(events: Sequence[str]) -> Iterator[str]:
    """The batch's records as a JSON array, ``SLICE`` at a time: each the envelope's text with
    ``TimeGenerated`` (its timestamp) put first, spliced in without decoding it."""
    for i in range(0, len(events), SLICE):
        text = ",".join(f'{{"TimeGenerated":"{event_timestamp(e)}",{e[1:]}'
                        for e in events[i:i + SLICE])
        yield f"{',' if i else '['}{text}"
    yield "]"
