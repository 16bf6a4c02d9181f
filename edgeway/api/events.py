"""The event destinations' delivery in the API (Edgeway extensions): the ``delivery`` member
of each destination (backlog, dead letters, the last error and the last success), its dead
letters (``GET /event_destinations/{id}/dead_letters``, sent again with ``POST
.../dead_letters/resend``) and ``POST /event_destinations/{id}/verify``, which sends a real
test event to the target and reports its answer."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from edgeway import catalog
from edgeway.api import dialect, validate
from edgeway.api.http import body_bytes, decode, json_response
from edgeway.api.listing import MAX_PAGE
from edgeway.api.platform import Caller
from edgeway.config import EventsConfig
from edgeway.errors import ApiError
from edgeway.events.targets import Clients, Targets, verify
from edgeway.platform import Platform
from edgeway.store import outbox
from edgeway.store.repo import Repo

DESTINATIONS = catalog.BY_COLLECTION["event_destinations"]
Handler = Callable[[Request, Platform, Caller], Any]
DEAD_ID = f"^{outbox.DEAD_PREFIX}_[0-9A-Za-z]{{27}}$"


class DeadLetter(msgspec.Struct, kw_only=True):
    id: str
    event_id: str
    event_type: str
    event: dict[str, Any]  # the envelope, as it would have been sent
    error: str  # why the last attempt failed
    attempts: int
    failed_at: str


class DeadLetterList(msgspec.Struct, kw_only=True):
    dead_letters: list[DeadLetter]
    uri: str
    next_page_uri: str | None


class _Empty(msgspec.Struct, forbid_unknown_fields=True):
    pass


class Resend(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # the dead letters to send again; none: every one
    ids: list[Annotated[str, msgspec.Meta(pattern=DEAD_ID)]] = msgspec.field(
        default_factory=list)


class Resent(msgspec.Struct, kw_only=True):
    resent: int


class Verification(msgspec.Struct, kw_only=True):
    delivered: bool  # the target accepted the test event
    target: str
    event_id: str
    answer: str  # what the target answered (or why it could not be reached)
    permanent: bool  # the failure will not go away by itself (credentials, a missing stream)
    ms: float


TYPES = (DeadLetterList, Resend, Resent, Verification)


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if epoch else ""


async def present(repo: Repo, shown: list[dict[str, Any]]) -> None:
    """Fill the ``delivery`` member of rendered destinations."""
    states = await outbox.states(repo.tx, [d["id"] for d in shown])
    for d in shown:
        s = states.get(d["id"], outbox.State())
        d["delivery"] = {
            "backlog": s.backlog, "dead_letters": s.dead_letters, "delivered": s.delivered,
            "dropped": s.dropped, "attempts": s.attempts,
            "retry_at": _stamp(s.next_at) if s.attempts else "", "last_error": s.last_error,
            "last_error_at": s.last_error_at, "last_success_at": s.last_success_at}


async def _destination(platform: Platform, dest_id: str) -> dict[str, Any]:
    return await validate.found(Repo(platform.db.reader()), DESTINATIONS, dest_id)


def _page(request: Request) -> tuple[str | None, int]:
    before = request.query_params.get("before_id")
    if before is not None and not re.fullmatch(DEAD_ID, before):
        raise ApiError(f"'before_id' must be a dead letter id ({outbox.DEAD_PREFIX}_...).",
                       230)
    text = request.query_params.get("limit", str(MAX_PAGE))
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise ApiError(f"'limit' must be a whole number from 1 to {MAX_PAGE}.", 233)
    unknown = set(request.query_params) - {"before_id", "limit"}
    if unknown and dialect.current().native:  # (the vendor's dialect ignores them)
        raise ApiError(f"Unknown query parameter '{sorted(unknown)[0]}'; supported: "
                       "before_id, limit.", 231)
    return before, int(text)


async def dead_letters(request: Request, platform: Platform, _c: Caller) -> Response:
    await body_bytes(request, False)
    dest_id = request.path_params["id"]
    await _destination(platform, dest_id)
    before, limit = _page(request)
    rows = await outbox.dead_page(platform.db.reader(), dest_id, before, limit + 1)
    uri = f"{platform.settings.public_url}/event_destinations/{dest_id}/dead_letters"
    items = [{"id": r[0], "event_id": r[1], "event_type": r[2],
              "event": msgspec.json.decode(r[3]), "error": r[4], "attempts": int(r[5]),
              "failed_at": r[6]} for r in rows[:limit]]
    more = f"{uri}?before_id={items[-1]['id']}&limit={limit}" if len(rows) > limit else None
    return json_response(200, {"dead_letters": items, "uri": uri, "next_page_uri": more})


async def resend(request: Request, platform: Platform, _c: Caller) -> Response:
    given = decode(await body_bytes(request, True), Resend, {})
    only = list(given.get("ids") or [])
    dest_id = request.path_params["id"]
    await _destination(platform, dest_id)
    async with platform.db.write() as tx:
        count = await outbox.resend(tx, dest_id, only, time.time())
    platform.changed("event_outbox")  # (wakes the delivery worker)
    return json_response(200, {"resent": count})


async def check(request: Request, platform: Platform, _c: Caller) -> Response:
    decode(await body_bytes(request, True), _Empty, {})
    dest_id = request.path_params["id"]
    doc = await _destination(platform, dest_id)
    if platform.events is not None:
        return json_response(200, await platform.events.verify(dest_id, doc))
    targets = Targets(platform.sealer, Clients(EventsConfig(), "api"))
    try:
        return json_response(200, await verify(targets, dest_id, doc))
    finally:
        await targets.clients.close()


def routes() -> list[tuple[str, str, Handler]]:
    base = "/event_destinations/{id}"
    return [(f"{base}/dead_letters", "GET", dead_letters),
            (f"{base}/dead_letters/resend", "POST", resend),
            (f"{base}/verify", "POST", check)]


def paths() -> dict[str, dict[str, Any]]:
    from edgeway.api.openapi import _ref, id_param, operation

    dest = [id_param(DESTINATIONS)]
    before = {"name": "before_id", "in": "query", "required": False,
              "schema": {"type": "string", "pattern": DEAD_ID}}
    limit = {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}}
    empty = {"type": "object", "additionalProperties": False}
    tag = {"tags": ["event_destinations"]}
    return {
        "/event_destinations/{id}/dead_letters": {"get": {**operation(
            "ListEventDestinationDeadLetters", "Events that failed every delivery attempt",
            "200", _ref("DeadLetterList"), params=[*dest, before, limit]), **tag}},
        "/event_destinations/{id}/dead_letters/resend": {"post": {**operation(
            "ResendEventDestinationDeadLetters", "Put dead letters back into the outbox "
            "(those listed in ids, or all)", "200", _ref("Resent"), body=_ref("Resend"),
            params=dest), **tag}},
        "/event_destinations/{id}/verify": {"post": {**operation(
            "VerifyEventDestination", "Send a test event to the target and report its "
            "answer", "200", _ref("Verification"), body=empty, params=dest), **tag}},
    }
