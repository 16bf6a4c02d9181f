"""``GET /reserved_domains/{id}/dns_check`` and ``GET /agent_ingresses/{id}/dns_check``: the
records the user was told to create, resolved now (``dns.check``), each ok, missing or
wrong with the expected and the found values. When all are ok and the certificate order
failed on the user's DNS before (``DNS_ERROR``), it is tried again at once instead of at its
retry time: at most once per first retry interval (a minute), whoever asks (reading is open
to every key), so that checks cannot defeat the back-off the CA's rate limits call for."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from edgeway import catalog
from edgeway.acme.status import FIRST_RETRY
from edgeway.api import validate
from edgeway.api.http import body_bytes, json_response
from edgeway.api.platform import Caller
from edgeway.dns import check
from edgeway.errors import ApiError
from edgeway.platform import Platform
from edgeway.store.acme import AcmeStore
from edgeway.store.repo import Repo

INGRESSES = catalog.BY_COLLECTION["agent_ingresses"]


class DnsCheckRecord(msgspec.Struct, kw_only=True):
    name: str
    type: str
    expected: list[str]
    found: list[str]
    status: Literal["ok", "missing", "wrong"]
    msg: str


class DnsCheck(msgspec.Struct, kw_only=True):
    """The answer of a DNS check (for the OpenAPI document)."""

    id: str
    domain: str
    checked_at: str
    ok: bool
    resolver: str
    records: list[DnsCheckRecord]


def dns_check(collection: str) -> Callable[[Request, Platform, Caller], Awaitable[Response]]:
    kind = catalog.BY_COLLECTION[collection]

    async def run(request: Request, platform: Platform, _c: Caller) -> Response:
        await body_bytes(request, False)
        id_ = request.path_params["id"]
        repo = Repo(platform.db.reader())
        doc = await validate.found(repo, kind, id_)
        settings = platform.settings
        if kind is INGRESSES:
            records = check.ingress_records(doc)
        else:
            zones = [str(d["domain"]) for _i, d in await repo.all_docs(INGRESSES)]
            records = check.reserved_records(doc, settings, zones)
        try:
            await check.run(records, settings.dns_check_resolvers, settings.public_ips)
        except check.ResolverFailed as exc:
            raise ApiError(f"The DNS check could not resolve: {exc}", 9002, status=502) \
                from None
        if all(r.status == "ok" for r in records) and \
                await AcmeStore(platform.db).retry_now(id_, FIRST_RETRY):  # (fixed: go on)
            platform.changed("managed_certificates")
        out = {"id": id_, "domain": doc["domain"],
               "checked_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
               **check.report(records, settings.dns_check_resolvers)}
        return json_response(200, out)
    return run
