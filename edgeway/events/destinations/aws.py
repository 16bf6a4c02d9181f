"""What the three AWS targets share: boto3 clients with a destination's ``auth`` (``creds``:
its access key; ``role``: temporary credentials from STS ``AssumeRole``, made with the
server's own AWS credentials and renewed five minutes before they expire), the region and
name in an ARN and error classification (boto3's blocking calls run on the targets' thread
pool, ``destinations.call``). ``--events-aws-endpoint-url`` sends
every service to one endpoint; otherwise boto3 honours the standard ``AWS_ENDPOINT_URL`` and
``AWS_ENDPOINT_URL_<SERVICE>`` variables.

``StreamBatch`` is the batch put of the two stream targets (``firehose``, ``kinesis``), which
differ only in names and in the shape of a record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from edgeway.events.destinations import Clients, DeliveryError, call

PERMANENT_CODES = frozenset({
    "AccessDenied", "AccessDeniedException", "UnrecognizedClientException",
    "InvalidSignatureException", "InvalidClientTokenId", "SignatureDoesNotMatch",
    "ResourceNotFoundException", "ValidationException", "InvalidArgumentException",
    "ExpiredTokenException", "KMSAccessDeniedException", "InvalidParameterException"})
SESSION_NAME = "edgeway-events"


def arn_parts(arn: str, marker: str) -> tuple[str, str]:
    """(region, resource name) of an ARN: ``arn:aws:kinesis:us-east-1:123:stream/NAME``."""
    parts = arn.split(":", 5)
    name = parts[5].split(marker, 1)[1] if marker in parts[5] else parts[5]
    return parts[3], name.removesuffix(":*")


def failure(service: str, exc: Exception, accepted: int = 0) -> DeliveryError:
    """A boto3 error as a DeliveryError: refused credentials and missing resources are
    permanent; throttling, 5xx and unreachable endpoints are worth retrying."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        return DeliveryError(f"{service} refused: {code}: {err.get('Message', '')}",
                             permanent=code in PERMANENT_CODES, accepted=accepted)
    if isinstance(exc, BotoCoreError):
        return DeliveryError(f"{service} unreachable: {exc}", accepted=accepted)
    raise exc


class Access:
    """boto3 clients of one destination, with fresh credentials."""

    def __init__(self, auth: dict[str, Any], secret: Callable[[str], str], region: str,
                 clients: Clients) -> None:
        self.region, self.endpoint = region, clients.options.aws_endpoint_url or None
        self.timeout = clients.options.timeout
        self.role = (auth.get("role") or {}).get("role_arn")
        creds = auth.get("creds") or {}
        self.keys: tuple[str, str, str | None] | None = (
            creds["access_key_id"], secret(creds["secret_access_key"]), None) if creds else None
        self._clients: dict[str, Any] = {}
        self._expires = 0.0
        self._lock = threading.Lock()

    def _config(self) -> Any:
        from botocore.config import Config

        return Config(connect_timeout=self.timeout, read_timeout=self.timeout,
                      retries={"max_attempts": 1}, user_agent_extra="edgeway-events")

    def _assume(self) -> tuple[str, str, str | None]:
        import boto3

        sts = boto3.client("sts", region_name=self.region, endpoint_url=self.endpoint,
                           config=self._config())
        got = sts.assume_role(RoleArn=self.role, RoleSessionName=SESSION_NAME)["Credentials"]
        self._expires = got["Expiration"].timestamp() - 300
        return got["AccessKeyId"], got["SecretAccessKey"], got["SessionToken"]

    def client(self, service: str) -> Any:
        """(In a pool thread.) The service's client, its credentials renewed when due."""
        import boto3

        with self._lock:
            if self.role and time.time() >= self._expires:
                self._clients.clear()
                self.keys = self._assume()
            if service not in self._clients:
                key, secret, token = self.keys or (None, None, None)
                self._clients[service] = boto3.client(
                    service, region_name=self.region, endpoint_url=self.endpoint,
                    aws_access_key_id=key, aws_secret_access_key=secret,
                    aws_session_token=token, config=self._config())
            return self._clients[service]


class StreamBatch:
    """One put of a batch of records, one per event, into the stream the destination's ARN
    names. When the service refuses some records (a partial failure: throttling), the batch
    is sent again from the first one refused (those before it arrived); an answer counting
    refusals without marking any record sends it all again."""

    kind: str  # the target member
    max_batch = 500  # records per call (both services)
    max_bytes: int
    label: str  # the service, in messages
    service: str  # boto3's
    operation: str  # the API call, in the answer; boto3's method is ``method``
    method: str
    arn_member: str  # the member holding the stream's ARN, and the marker before its name
    arn_marker: str
    name_member: str  # the call's member naming the stream
    failed_key: str  # the answer's count of refused records, and its list of results
    results_key: str

    def __init__(self, body: dict[str, Any], secret: Callable[[str], str],
                 clients: Clients) -> None:
        region, self.name = arn_parts(body[self.arn_member], self.arn_marker)
        self.access = Access(body["auth"], secret, region, clients)

    def record(self, event: str) -> dict[str, Any]:
        """The record of one event (its envelope's JSON text)."""
        raise NotImplementedError

    def _put(self, events: Sequence[str]) -> dict[str, Any]:
        put = getattr(self.access.client(self.service), self.method)
        answer: dict[str, Any] = put(**{self.name_member: self.name,
                                        "Records": [self.record(e) for e in events]})
        return answer

    async def send(self, events: Sequence[str]) -> str:
        try:
            answer = await call(self._put, events)
        except Exception as exc:
            raise failure(self.label, exc) from None
        failed = int(answer.get(self.failed_key, 0))
        if failed:
            results = answer.get(self.results_key, [])
            first = next((i for i, r in enumerate(results) if r.get("ErrorCode")), None)
            if first is None:
                raise DeliveryError(f"{self.label} refused {failed} of {len(events)} records "
                                    f"without marking which ({self.failed_key} {failed}, no "
                                    "ErrorCode in its answer): all are sent again")
            raise DeliveryError(f"{self.label} refused {failed} of {len(events)} records: "
                                f"{results[first].get('ErrorCode')}: "
                                f"{results[first].get('ErrorMessage', '')}", accepted=first)
        return f"{self.operation}: {len(events)} records, {self.failed_key} 0"
