"""Event kinds: destinations (where events go) and subscriptions (which events go there).

A destination's secrets (cloud secret access keys, the monitoring API key, the logs ingestion
client secret) are stored sealed with the platform secret key (context ``SEAL_CONTEXT``) and
rendered as ``MASK``; a write that gives ``MASK`` back for a target of the same kind keeps the
stored secret, so a GET, edit, PATCH round trip does not need the secret again.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

import msgspec

from edgeway.catalog import checks
from edgeway.catalog.event_sources import EventSource, SourceIn, present_sources, sources
from edgeway.catalog.model import Context, Field, Kind, Link, Where, standard
from edgeway.catalog.sealing import MASK
from edgeway.errors import Invalid


class _Strict(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class CloudRole(_Strict):
    role_arn: str


class CloudCreds(_Strict):
    access_key_id: str
    secret_access_key: str


class CloudAuth(_Strict):
    role: CloudRole | None = None
    creds: CloudCreds | None = None


class DeliveryStream(_Strict):
    auth: CloudAuth
    delivery_stream_arn: str


class DataStream(_Strict):
    auth: CloudAuth
    stream_arn: str


class LogGroup(_Strict):
    auth: CloudAuth
    log_group_arn: str


class Monitoring(_Strict):
    api_key: str
    tags: str = ""
    service: str = ""
    site: str = ""


class CloudLogsIngestion(_Strict):
    tenant_id: str
    client_id: str
    client_secret: str
    logs_ingestion_uri: str
    data_collection_rule_id: str
    data_collection_stream_name: str


class EventTarget(_Strict):
    delivery_stream: DeliveryStream | None = None
    data_stream: DataStream | None = None
    log_group: LogGroup | None = None
    monitoring: Monitoring | None = None
    cloud_logs_ingestion: CloudLogsIngestion | None = None


_ARNS = {
    "delivery_stream": ("delivery_stream_arn", "firehose", "deliverystream/"),
    "data_stream": ("stream_arn", "kinesis", "stream/"),
    "log_group": ("log_group_arn", "logs", "log-group:"),
}


def _auth(member: str, auth: dict[str, Any]) -> None:
    chosen = [k for k in ("role", "creds") if auth.get(k) is not None]
    if len(chosen) != 1:
        raise Invalid(member, "exactly one of 'role' or 'creds' must be set "
                      f"(got {len(chosen)})", 240)
    if chosen == ["role"]:
        checks.arn(f"{member}.role.role_arn", auth["role"]["role_arn"], "iam", "role/")
    else:
        for key in ("access_key_id", "secret_access_key"):
            checks.non_empty(f"{member}.creds.{key}", auth["creds"][key], 240)


def _target(value: dict[str, Any], _ctx: Context) -> dict[str, Any]:
    chosen = [k for k, v in value.items() if v is not None]
    if len(chosen) != 1:
        raise Invalid("target", "exactly one target member must be set, one of "
                      + ", ".join(value) + f" (got {len(chosen)})", 236)
    name = chosen[0]
    body = value[name]
    if name in _ARNS:
        arn_member, service, resource = _ARNS[name]
        _auth(f"target.{name}.auth", body["auth"])
        checks.arn(f"target.{name}.{arn_member}", body[arn_member], service, resource)
    elif name == "monitoring":
        checks.non_empty("target.monitoring.api_key", body["api_key"], 236)
    else:
        for key, text in body.items():
            checks.non_empty(f"target.{name}.{key}", text, 236)
        checks.https_url(f"target.{name}.logs_ingestion_uri", body["logs_ingestion_uri"])
    return value


SEAL_CONTEXT = "event destination secret"
_CREDS = (("auth", "creds", "secret_access_key"),)
SECRETS: dict[str, tuple[tuple[str, ...], ...]] = {
    "delivery_stream": _CREDS, "data_stream": _CREDS, "log_group": _CREDS,
    "monitoring": (("api_key",),), "cloud_logs_ingestion": (("client_secret",),),
}


def _holder(obj: Any, path: tuple[str, ...]) -> dict[str, Any] | None:
    """The object holding the member at the end of ``path`` (None if any step is unset)."""
    for step in path[:-1]:
        obj = obj.get(step) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) and obj.get(path[-1]) is not None else None


def _seal_secrets(doc: dict[str, Any], ctx: Context,
                  old: dict[str, Any] | None) -> dict[str, Any]:
    if old is not None and doc["target"] is old.get("target"):
        return {}  # target not written
    target = copy.deepcopy(doc["target"])
    before = (old or {}).get("target") or {}
    for name, paths in SECRETS.items():
        for path in paths:
            holder = _holder(target.get(name), path)
            if holder is None:
                continue
            value = holder[path[-1]]
            if value == MASK:
                kept = _holder(before.get(name), path)
                if kept is None:
                    raise Invalid(f"target.{name}.{'.'.join(path)}", f"'{MASK}' stands for "
                                  "the stored secret, and this destination has none for "
                                  "this target: give the secret itself", 236)
                value = kept[path[-1]]
            if not value.startswith("v1:"):  # not sealed yet
                value = ctx.sealer.seal(value.encode(), SEAL_CONTEXT)
            holder[path[-1]] = value
    return {"target": target}


def _masked(target: dict[str, Any], _where: Where) -> dict[str, Any]:
    shown = copy.deepcopy(target)
    for name, paths in SECRETS.items():
        for path in paths:
            holder = _holder(shown.get(name), path)
            if holder is not None:
                holder[path[-1]] = MASK
    return shown


class Delivery(msgspec.Struct, kw_only=True):
    """How delivery to a destination goes (an Edgeway extension; response only)."""
    backlog: int  # events waiting in the outbox
    dead_letters: int  # events that failed every attempt (GET .../dead_letters)
    delivered: int  # events delivered
    dropped: int  # traffic events dropped on a full queue
    attempts: int  # failed attempts of the batch now being retried (0: none)
    retry_at: str  # when it is tried again (RFC 3339; "" when not backing off)
    last_error: str
    last_error_at: str
    last_success_at: str


EVENT_DESTINATIONS = Kind(
    collection="event_destinations", prefix="ed", list_key="event_destinations",
    title="EventDestination",
    describe="Where events are delivered: exactly one target.",
    fields=(
        *standard(),
        Field("format", Literal["json"], "serialization of events; only json", update=True,
              default="json"),
        Field("target", EventTarget, "the delivery target: exactly one member set; its "
              f"secrets are stored sealed and shown as '{MASK}' (writing '{MASK}' back keeps "
              "the stored secret)", create="required", update=True, check=_target,
              present=_masked),
        Field("delivery", Delivery | None, "how delivery goes: backlog, dead letters, the "
              "last error and the last success (response only)", create="no"),
    ),
    derive=_seal_secrets,
)


EVENT_SUBSCRIPTIONS = Kind(
    collection="event_subscriptions", prefix="esb", list_key="event_subscriptions",
    title="EventSubscription",
    describe="Which event types are delivered to which destinations.",
    fields=(
        *standard(),
        Field("sources", list[SourceIn], "event types to deliver; traffic events may select "
              "fields and a CEL filter", update=True,
              default=list, empty_is_unset=True, check=sources, out_type=list[EventSource],
              present=present_sources),
        Field("destination_ids", list[str], "event destinations to deliver to", update=True,
              default=list, response=False,
              link=Link(("event_destinations",), "restrict", render_as="destinations")),
    ),
)

KINDS = (EVENT_DESTINATIONS, EVENT_SUBSCRIPTIONS)
