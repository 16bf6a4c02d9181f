"""The OpenAPI 3.1 document, generated from the same declarations that build the routes."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from edgeway import catalog
from edgeway.api import events as events_api
from edgeway.api import filters
from edgeway.api.dns_checks import DnsCheck
from edgeway.api.listing import MAX_PAGE, SELECTORS, URL_PATTERN
from edgeway.api.modules import ATTACHED
from edgeway.catalog import event_sources, jsonschema, rules
from edgeway.catalog.model import Kind
from edgeway.catalog.modules import REGISTRY, On
from edgeway.catalog.shapes import shapes

ERROR_SCHEMA = {
    "type": "object",
    "required": ["status_code", "msg", "details"],
    "properties": {
        "error_code": {"type": "string"},
        "status_code": {"type": "integer"},
        "msg": {"type": "string"},
        "details": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
_VERSION = {"name": "Edgeway-Version", "in": "header", "required": True,
            "schema": {"type": "string", "enum": ["2"]},
            "description": "API version; 'Service-Version' is accepted too."}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def operation(op_id: str, summary: str, ok: str, ok_schema: dict[str, Any] | None, *,
              body: dict[str, Any] | None = None, body_required: bool = False,
              params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    responses: dict[str, Any] = {
        ok: {"description": summary, **({"content": _json(ok_schema)} if ok_schema else {})},
        "4XX": {"description": "error", "content": _json(_ref("Error"))},
    }
    out: dict[str, Any] = {"operationId": op_id, "summary": summary,
                           "parameters": [_VERSION, *(params or [])], "responses": responses}
    if body is not None:
        out["requestBody"] = {"required": body_required, "content": _json(body)}
    return out


def id_param(kind: Kind, name: str = "id") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "string", "pattern": f"^{kind.prefix}_[0-9A-Za-z]{{27}}$"}}


def _page_params(kind: Kind) -> list[dict[str, Any]]:
    before = id_param(kind, "before_id")
    out = [{**before, "in": "query", "required": False},
           {"name": "limit", "in": "query", "required": False,
            "schema": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE}},
           {"name": "filter", "in": "query", "required": False,
            "description": "a CEL expression over each resource (obj), e.g. "
                           "obj.metadata.contains(\"x\")",
            "schema": {"type": "string", "maxLength": filters.MAX_LENGTH}}]
    for name, member in SELECTORS.get(kind.collection, {}).items():
        pattern = id_param(kind)["schema"]["pattern"] if member == "id" else URL_PATTERN
        out.append({"name": name, "in": "query", "required": False, "explode": True,
                    "description": f"only the resources whose {member} is one of these "
                                   "(repeatable)",
                    "schema": {"type": "array", "items": {"type": "string",
                                                          "pattern": pattern}}})
    return out


def _tagged(kind: Kind, paths: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    for item in paths.values():
        for op in item.values():
            op["tags"] = [kind.collection]
    return paths


def _parent_params(kind: Kind) -> list[dict[str, Any]]:
    """Path parameters of a nested kind's URL (the ``edge_id`` of routes)."""
    out = []
    for name in re.findall(r"\{(\w+)\}", kind.path or ""):
        link = kind.field(name).link
        assert link is not None
        out.append(id_param(catalog.BY_COLLECTION[link.kinds[0]], name))
    return out


def _links(kind: Kind) -> dict[str, Any]:
    params = {"id": "$response.body#/id"}
    params.update({p["name"]: f"$response.body#/{p['name']}" for p in _parent_params(kind)})
    return {op: {"operationId": f"{op}{kind.title}", "parameters": params}
            for op in ("Get", "Update", "Delete") if op.lower() in kind.ops}


def module_paths(kind: Kind, on: On) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    params = [*_parent_params(kind), id_param(kind)]
    required = {name: patch.get("required") for name, patch in jsonschema.components().items()}
    for f in kind.fields:
        m = REGISTRY.get(f.name)
        if m is None:
            continue
        t = kind.title + "".join(w.capitalize() for w in f.name.split("_")) + "Module"
        body = m.request_for(on)
        shown = _ref(m.response.__name__)
        out[f"{kind.url}/{{id}}/{f.name}"] = {
            "put": operation(f"Replace{t}", f"Replace the {f.name} module", "200", shown,
                             body=_ref(body.__name__), params=params,
                             body_required=bool(required.get(body.__name__))),
            "get": operation(f"Get{t}", f"Get the {f.name} module", "200", shown,
                             params=params),
            "delete": operation(f"Delete{t}", f"Remove the {f.name} module", "204", None,
                                params=params),
        }
    return out


def kind_paths(kind: Kind) -> dict[str, dict[str, Any]]:
    s = shapes(kind)
    t = kind.title
    item = _ref(s.response.__name__)
    coll: dict[str, Any] = {}
    one: dict[str, Any] = {}
    parents = _parent_params(kind)
    if "create" in kind.ops:
        coll["post"] = operation(f"Create{t}", f"Create a {t}", "201", item,
                                 body=_ref(s.create.__name__), body_required=True,
                                 params=parents)  # a create takes a JSON object, {} at least
        coll["post"]["responses"]["201"]["links"] = _links(kind)
    if "list" in kind.ops:
        coll["get"] = operation(f"List{t}", f"List {kind.collection}", "200",
                                _ref(s.page.__name__), params=_page_params(kind))
    p = [*parents, id_param(kind)]
    if "get" in kind.ops:
        one["get"] = operation(f"Get{t}", f"Get a {t}", "200", item, params=p)
    if "update" in kind.ops:
        one["patch"] = operation(f"Update{t}", f"Update a {t}", "200", item,
                                 body=_ref(s.update.__name__), params=p)
    if "delete" in kind.ops:
        one["delete"] = operation(f"Delete{t}", f"Delete a {t}", "204", None, params=p)
    return {kind.url: coll, f"{kind.url}/{{id}}": one}


def _extra_paths() -> dict[str, dict[str, Any]]:
    rd = catalog.BY_COLLECTION["reserved_domains"]
    esb = catalog.BY_COLLECTION["event_subscriptions"]
    sub = [id_param(esb)]
    typ = {"name": "type", "in": "path", "required": True, "schema": {"type": "string"}}
    src = _ref("EventSource")
    return {
        "/reserved_domains/{id}/certificate_management_policy": {"delete": operation(
            "DeleteReservedDomainCertificateManagementPolicy", "Stop certificate management",
            "204", None, params=[id_param(rd)])},
        "/reserved_domains/{id}/certificate": {"delete": operation(
            "DeleteReservedDomainCertificate", "Detach an uploaded certificate", "204", None,
            params=[id_param(rd)])},
        **{f"/{c}/{{id}}/dns_check": {"get": operation(
            f"Check{catalog.BY_COLLECTION[c].title}Dns", "Resolve the DNS records to create "
            "(each ok, missing or wrong); 502 when the resolver does not answer", "200",
            _ref("DnsCheck"), params=[id_param(catalog.BY_COLLECTION[c])])}
           for c in ("reserved_domains", "agent_ingresses")},
        "/event_subscriptions/{id}/sources": {
            "post": operation("CreateEventSource", "Add an event type", "201", src,
                              body=_ref("SourceIn"), body_required=True, params=sub),
            "get": operation("ListEventSources", "List event types", "200",
                             _ref("EventSourceList"), params=sub)},
        **{f"/tunnel_sessions/{{id}}/{action}": {"post": operation(
            f"{action.capitalize()}TunnelSession", f"Ask the agent of the session to {action}",
            "204", None, body={"type": "object", "additionalProperties": False},
            params=[id_param(catalog.BY_COLLECTION["tunnel_sessions"])])}
           for action in ("stop", "restart", "update")},
        "/vaults/{id}/secrets": {"get": operation(
            "ListVaultSecrets", "List the secrets of a vault", "200",
            _ref("SecretList"), params=[id_param(catalog.BY_COLLECTION["vaults"]),
                                        *_page_params(catalog.BY_COLLECTION["vault_secrets"])[:2]])},
        "/event_subscriptions/{id}/sources/{type}": {
            "get": operation("GetEventSource", "Get an event type", "200", src,
                             params=[*sub, typ]),
            "patch": operation("UpdateEventSource", "Change an event type's filter or fields",
                               "200", src, body=_ref("SourceUpdate"), params=[*sub, typ]),
            "delete": operation("DeleteEventSource", "Remove an event type", "204", None,
                                params=[*sub, typ])},
    }


def _module_types(kind: Kind, on: On) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for f in kind.fields:
        if f.name in REGISTRY:
            m = REGISTRY[f.name]
            out += [(f.name, m.request_for(on)), (f.name, m.response)]
    return out


class EventSourceList(msgspec.Struct):
    sources: list[event_sources.EventSource]
    uri: str


def document(public_url: str) -> dict[str, Any]:
    types: list[Any] = [event_sources.SourceIn, event_sources.SourceUpdate,
                        event_sources.EventSource, EventSourceList, DnsCheck,
                        *events_api.TYPES]
    paths: dict[str, dict[str, Any]] = {}
    for kind in catalog.ALL:
        if not kind.routed:
            continue
        s = shapes(kind)
        types += [s.create, s.update, s.response, s.page]
        paths.update(_tagged(kind, {k: v for k, v in kind_paths(kind).items() if v}))
        if kind.collection in ATTACHED:
            on = ATTACHED[kind.collection]
            paths.update(_tagged(kind, module_paths(kind, on)))
            types += [m for name, m in _module_types(kind, on)]
    paths.update(_extra_paths())
    paths.update(events_api.paths())
    _, components = msgspec.json.schema_components(
        types, ref_template="#/components/schemas/{name}")
    components["Error"] = ERROR_SCHEMA
    jsonschema.merge(components)
    return {
        "openapi": "3.1.0",
        "info": {"title": "Edgeway management API", "version": "2"},
        "x-edgeway-rules": rules.document_rules(),
        "servers": [{"url": public_url}],
        "security": [{"bearer": []}],
        "tags": [{"name": k.collection, "description": k.describe} for k in catalog.ALL
                 if k.routed],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
    }
