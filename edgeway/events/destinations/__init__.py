"""Delivery targets, one file per kind of event destination target: ``firehose``
(delivery_stream), ``kinesis`` (data_stream), ``cloudwatch`` (log_group), ``datadog``
(monitoring) and ``azure`` (cloud_logs_ingestion). Each sends a batch of events, in order, in
one call of the vendor's API and says what the target answered; ``DeliveryError`` says why it
failed, whether retrying can help (``permanent``: refused credentials, a stream that does not
exist) and how many events at the head of the batch got through before the failure.

Every target does its work (encoding, compressing, the vendor's blocking client: boto3, a
synchronous httpx client) on ``POOL``, a few threads shared by all (``call``): a slow target
never holds up the event loop, and the compression and TLS work happen outside it.

``build`` makes the target of a stored destination (its sealed secrets opened), with the
server's endpoint overrides (``EventsConfig``) for tests and private deployments.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Protocol, TypeVar

import httpx
from isal import isal_zlib

from edgeway.catalog.events import SEAL_CONTEXT
from edgeway.config import EventsConfig
from edgeway.pki.seal import Sealer

T = TypeVar("T")
POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="edgeway-events")


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a target's blocking work in the pool."""
    return await asyncio.get_running_loop().run_in_executor(POOL, partial(fn, *args, **kwargs))


# An event on its way is its envelope's JSON text (``envelope.py``), which begins with
# ``{"event_id":"ev_<27>","event_type":"`` as every envelope here is written: the two are
# read off it without decoding the rest.
TYPE_AT = len('{"event_id":"ev_') + 27 + len('","event_type":"')


def event_id(body: str) -> str:
    return body[13:TYPE_AT - 16]


def event_type(body: str) -> str:
    return body[TYPE_AT:body.index('"', TYPE_AT)]


def event_timestamp(body: str) -> str:
    at = body.index('"event_timestamp":"', TYPE_AT) + 19
    return body[at:body.index('"', at)]


SLICE = 100  # events written (and compressed) at a time


def gzipped(texts: Iterable[str]) -> bytes:
    """One gzip member of ``texts``, compressed as they come: a batch written a slice at a
    time rather than as one string of hundreds of KB, whose making costs more than its
    writing (fresh pages from the kernel). ISA-L's deflate at level 1 (``isal``): a
    twentieth of zlib's CPU, for payloads a fifth larger."""
    z = isal_zlib.compressobj(1, isal_zlib.DEFLATED, 31)  # (31: a gzip member)
    out = [z.compress(text.encode()) for text in texts]
    out.append(z.flush())
    return b"".join(out)


class DeliveryError(Exception):
    def __init__(self, message: str, permanent: bool = False, accepted: int = 0) -> None:
        super().__init__(message)
        self.permanent = permanent  # retrying the same request cannot succeed
        self.accepted = accepted  # events at the head of the batch that got through


class Target(Protocol):
    kind: str  # the target member: delivery_stream, data_stream, ...
    max_batch: int  # events per call
    max_bytes: int  # bytes of event bodies per call

    async def send(self, events: Sequence[str]) -> str:
        """Deliver ``events`` (envelopes' JSON text) in order; the target's answer, or
        ``DeliveryError``."""
        ...


def unseal(sealer: Sealer, value: str) -> str:
    return sealer.open(value, SEAL_CONTEXT).decode() if value.startswith("v1:") else value


def chosen(target: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The one target member set, and its configuration."""
    for name, body in target.items():
        if body is not None:
            return name, body
    raise ValueError("the destination has no target")


class Clients(Protocol):
    """What targets share on a node: the server's options, its node id, the HTTP client."""
    options: EventsConfig
    node: str

    def http(self) -> httpx.Client: ...


def build(target: dict[str, Any], sealer: Sealer, clients: Clients) -> Target:
    from edgeway.events.destinations import azure, cloudwatch, datadog, firehose, kinesis

    name, body = chosen(target)
    makers: dict[str, Callable[[dict[str, Any], Callable[[str], str], Clients], Target]] = {
        "delivery_stream": firehose.Firehose, "data_stream": kinesis.Kinesis,
        "log_group": cloudwatch.CloudWatchLogs, "monitoring": datadog.Datadog,
        "cloud_logs_ingestion": azure.AzureLogs}
    return makers[name](body, lambda v: unseal(sealer, v), clients)
