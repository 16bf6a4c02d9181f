"""The few operations that are not plain CRUD: reserved-domain certificate detaches, DNS
checks (``dns_checks.py``), the ``sources`` sub-collection of event subscriptions, and the
secrets of one vault."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from edgeway import catalog
from edgeway.api import listing, present, validate
from edgeway.api.crud import writing
from edgeway.api.dns_checks import dns_check
from edgeway.api.http import body_bytes, create_body, decode, json_response, no_content
from edgeway.api.platform import Caller
from edgeway.catalog.event_sources import SourceIn, SourceUpdate, present_source, source
from edgeway.errors import ApiError, Conflict, NotFound
from edgeway.platform import Platform
from edgeway.store.repo import Item, Repo

Handler = Callable[[Request, Platform, Caller], Any]
RESERVED = catalog.BY_COLLECTION["reserved_domains"]
SUBSCRIPTIONS = catalog.BY_COLLECTION["event_subscriptions"]
SESSIONS = catalog.BY_COLLECTION["tunnel_sessions"]
VAULTS, SECRETS = catalog.BY_COLLECTION["vaults"], catalog.BY_COLLECTION["vault_secrets"]


class _Empty(msgspec.Struct, forbid_unknown_fields=True):
    pass


async def _mutate(platform: Platform, caller: Caller, kind: catalog.Kind, id_: str,
                  change: Callable[[dict[str, Any]], Any]) -> Any:
    validate.id_in_path(kind, id_)  # (before a write transaction begins)
    async with platform.db.write() as tx:
        repo = writing(tx, platform, caller)
        doc = await validate.found(repo, kind, id_)
        result = change(doc)
        await repo.replace(kind, id_, doc)
        await repo.set_links(kind, id_, await validate.links(repo, kind, doc, doc, id_))
    platform.changed(kind.collection)
    return result


async def delete_cert_policy(request: Request, platform: Platform, caller: Caller) -> Response:
    await body_bytes(request, False)

    def change(doc: dict[str, Any]) -> None:
        doc["certificate_management_policy"] = None
        doc["certificate_management_status"] = None

    await _mutate(platform, caller, RESERVED, request.path_params["id"], change)
    return no_content()


async def delete_certificate(request: Request, platform: Platform, caller: Caller) -> Response:
    await body_bytes(request, False)

    def change(doc: dict[str, Any]) -> None:
        if doc.get("certificate_management_policy"):
            raise ApiError("The certificate is managed by the certificate management policy; "
                           "delete the policy instead of detaching the certificate.", 436)
        doc["certificate_id"] = None

    await _mutate(platform, caller, RESERVED, request.path_params["id"], change)
    return no_content()


def _base(platform: Platform, sub_id: str) -> str:
    return f"{platform.settings.public_url}/event_subscriptions/{sub_id}"


async def _subscription(platform: Platform, sub_id: str) -> dict[str, Any]:
    return await validate.found(Repo(platform.db.reader()), SUBSCRIPTIONS, sub_id)


def _find(doc: dict[str, Any], type_: str) -> dict[str, Any]:
    for s in doc["sources"]:
        if s["type"] == type_:
            return dict(s)
    raise NotFound(f"The subscription has no source '{type_}'.")


async def create_source(request: Request, platform: Platform, caller: Caller) -> Response:
    sub_id = request.path_params["id"]
    body = decode(await create_body(request), SourceIn, {"type": 238})
    made = source("", body)

    def change(doc: dict[str, Any]) -> None:
        if any(s["type"] == made["type"] for s in doc["sources"]):
            raise Conflict(f"The subscription already has the source '{made['type']}'.", 413)
        doc["sources"].append(made)

    await _mutate(platform, caller, SUBSCRIPTIONS, sub_id, change)
    return json_response(201, present_source(_base(platform, sub_id), made))


async def list_sources(request: Request, platform: Platform, _c: Caller) -> Response:
    await body_bytes(request, False)
    sub_id = request.path_params["id"]
    doc = await _subscription(platform, sub_id)
    base = _base(platform, sub_id)
    return json_response(200, {"sources": [present_source(base, s) for s in doc["sources"]],
                               "uri": f"{base}/sources"})


async def get_source(request: Request, platform: Platform, _c: Caller) -> Response:
    await body_bytes(request, False)
    sub_id, type_ = request.path_params["id"], request.path_params["type"]
    found = _find(await _subscription(platform, sub_id), type_)
    return json_response(200, present_source(_base(platform, sub_id), found))


async def update_source(request: Request, platform: Platform, caller: Caller) -> Response:
    """PATCH: a new ``filter`` or ``fields`` (the official clients send no body, or {})."""
    given = decode(await body_bytes(request, True), SourceUpdate, {})
    sub_id, type_ = request.path_params["id"], request.path_params["type"]

    def change(doc: dict[str, Any]) -> dict[str, Any]:
        updated = source("", {**_find(doc, type_), **given})
        doc["sources"] = [updated if s["type"] == type_ else s for s in doc["sources"]]
        return updated

    if not given:  # nothing to change: no write, no event
        updated = _find(await _subscription(platform, sub_id), type_)
    else:
        updated = await _mutate(platform, caller, SUBSCRIPTIONS, sub_id, change)
    return json_response(200, present_source(_base(platform, sub_id), updated))


async def delete_source(request: Request, platform: Platform, caller: Caller) -> Response:
    await body_bytes(request, False)
    type_ = request.path_params["type"]

    def change(doc: dict[str, Any]) -> None:
        _find(doc, type_)
        doc["sources"] = [s for s in doc["sources"] if s["type"] != type_]

    await _mutate(platform, caller, SUBSCRIPTIONS, request.path_params["id"], change)
    return no_content()


COMMANDS = {"stop": (5, {}), "restart": (4, {}),
            "update": (6, {"Version": "", "PermitMajorVersion": False})}


def session_action(action: str) -> Handler:
    """``POST /tunnel_sessions/{id}/<action>``: the command reaches the agent, which answers."""
    kind, body = COMMANDS[action]

    async def run(request: Request, platform: Platform, _c: Caller) -> Response:
        raw = await body_bytes(request, True)
        decode(raw, _Empty, {})  # Go sends {}, Python nothing; nothing else is accepted
        sid = validate.id_in_path(SESSIONS, request.path_params["id"])
        answer = await platform.agents.command(sid, kind, body) if platform.agents else None
        if answer is None:
            raise NotFound(f"TunnelSession '{sid}' is not connected to this server.")
        if answer:
            raise ApiError(f"The agent refused to {action}: {answer}", 9001, status=400)
        return no_content()
    return run


async def vault_secrets(request: Request, platform: Platform, _caller: Caller) -> Response:
    """``GET /vaults/{id}/secrets``: a page of the vault's secrets, newest first."""
    await body_bytes(request, False)
    vault_id = validate.id_in_path(VAULTS, request.path_params["id"])
    q = listing.query(request, SECRETS)
    if q.filter is not None:
        raise ApiError("The query parameter 'filter' is not supported here; filter "
                       "GET /vault_secrets instead.", 231)
    repo = Repo(platform.db.reader())
    await validate.found(repo, VAULTS, vault_id)
    rows = sorted(await repo.docs_where(SECRETS, "vault_id", [vault_id]), reverse=True)
    items = [Item(id_, doc) for id_, doc in rows if q.before is None or id_ < q.before]
    base = platform.settings.public_url
    shown = await present.many(repo, SECRETS, items[:q.limit], base)
    uri = f"{base}/vaults/{vault_id}/secrets"
    nxt = f"{uri}?before_id={shown[-1]['id']}&limit={q.limit}" if len(items) > q.limit \
        else None
    return json_response(200, {SECRETS.list_key: shown, "uri": uri, "next_page_uri": nxt})


def routes() -> list[tuple[str, str, Handler]]:
    """``(path, method, handler)`` for each operation here."""
    sub = "/event_subscriptions/{id}/sources"
    return [
        ("/reserved_domains/{id}/certificate_management_policy", "DELETE", delete_cert_policy),
        ("/reserved_domains/{id}/certificate", "DELETE", delete_certificate),
        ("/reserved_domains/{id}/dns_check", "GET", dns_check("reserved_domains")),
        ("/agent_ingresses/{id}/dns_check", "GET", dns_check("agent_ingresses")),
        ("/vaults/{id}/secrets", "GET", vault_secrets),
        (sub, "POST", create_source),
        (sub, "GET", list_sources),
        (sub + "/{type}", "GET", get_source),
        (sub + "/{type}", "PATCH", update_source),
        (sub + "/{type}", "DELETE", delete_source),
        *((f"/tunnel_sessions/{{id}}/{action}", "POST", session_action(action))
          for action in COMMANDS),
    ]
