"""What the three AWS targets share: boto3 clients with a destination's ``auth`` (``creds``:
its access key; ``role``: temporary credentials from STS ``AssumeRole``, made with the
server's own AWS credentials and renewed five minutes before they expire), the region and
name in an ARN and error classification (boto3's blocking calls run on the targets' thread
pool, ``destinations.call``). ``--events-aws-endpoint-url`` sends
every service to one endpoint; otherwise boto3 honours the standard ``AWS_ENDPOINT_URL`` and
``AWS_ENDPOINT_URL_<SERVICE>`` variables.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from edgeway.events.destinations import Clients, DeliveryError

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
