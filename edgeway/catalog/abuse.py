"""Abuse reports: URLs served by this platform that someone reports as abusive (phishing,
malware). Any key that may write files one; each hostname of its URLs starts ``PENDING``.
Admins list the reports and decide per hostname: ``BANNED`` (the edge stops serving it and no
agent may bind it; for a ``tcp://`` URL, its address), ``UNBANNED`` (served again) or
``IGNORE``. The report's ``status`` follows: ``PENDING`` while no hostname is decided,
``PROCESSED`` once all are, ``PARTIALLY_PROCESSED`` between."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from edgeway.catalog import checks
from edgeway.catalog.model import Context, Field, Kind
from edgeway.errors import Invalid

MAX_URLS = 100
MAX_URL_BYTES = 2048
SCHEMES = ("http", "https", "tcp", "tls")
DECIDED = ("BANNED", "UNBANNED", "IGNORE")
HostStatus = Literal["PENDING", "BANNED", "UNBANNED", "IGNORE"]


class Hostname(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    hostname: str
    status: HostStatus = "PENDING"


def host_of(member: str, url: str) -> str:
    """The host name a reported URL names, lower case (400 naming ``member`` otherwise); for
    a ``tcp://`` URL its address, ``host:port`` (a host serves many TCP addresses)."""
    checks.byte_limit(member, url, MAX_URL_BYTES)
    parts = urlsplit(url.strip())
    try:
        host = parts.hostname
    except ValueError:
        host = None
    if parts.scheme.lower() not in SCHEMES or not host:
        raise Invalid(member, f"'{url}' must be a URL served here, with a scheme of "
                      f"{', '.join(SCHEMES)} and a host", 215)
    name = checks.host(member, host.rstrip("."))
    if parts.scheme.lower() != "tcp":
        return name
    try:
        port = parts.port
    except ValueError:
        port = None
    if not port:
        raise Invalid(member, f"'{url}' must name its port: tcp://host:port", 215)
    return f"[{name}]:{port}" if ":" in name else f"{name}:{port}"


def _urls(value: list[str], _ctx: Context) -> list[str]:
    if not value or len(value) > MAX_URLS:
        raise Invalid("urls", f"must list 1 to {MAX_URLS} URLs (it lists {len(value)})", 215)
    for i, url in enumerate(value):
        host_of(f"urls[{i}]", url)
    return [url.strip() for url in value]


def _decisions(value: list[Any], _ctx: Context) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = msgspec.to_builtins(value)
    for i, entry in enumerate(out):
        if entry["status"] not in DECIDED and entry["status"] != "PENDING":
            raise Invalid(f"hostnames[{i}].status", "must be PENDING, BANNED, UNBANNED or "
                          "IGNORE", 215)
        entry["hostname"] = entry["hostname"].strip().lower().rstrip(".")
    return out


def status_of(hostnames: list[dict[str, Any]]) -> str:
    decided = sum(1 for h in hostnames if h["status"] in DECIDED)
    return "PENDING" if not decided else \
        "PROCESSED" if decided == len(hostnames) else "PARTIALLY_PROCESSED"


def _derive(doc: dict[str, Any], _ctx: Context, old: dict[str, Any] | None) -> dict[str, Any]:
    """On create, each hostname of the URLs, pending; on update, the decisions given merged
    into the report's (a hostname the report does not have is refused)."""
    hosts = list(dict.fromkeys(host_of(f"urls[{i}]", url) for i, url in enumerate(doc["urls"])))
    statuses: dict[str, str] = {h: "PENDING" for h in hosts}
    if old is not None:
        statuses.update({h["hostname"]: h["status"] for h in old.get("hostnames") or []})
        for i, given in enumerate(doc.get("hostnames") or []):
            if given["hostname"] not in statuses:
                raise Invalid(f"hostnames[{i}].hostname", f"'{given['hostname']}' is not a "
                              f"hostname of this report ({', '.join(hosts)})", 215)
            statuses[given["hostname"]] = given["status"]
    hostnames = [{"hostname": h, "status": s} for h, s in statuses.items()]
    return {"hostnames": hostnames, "status": status_of(hostnames)}


ABUSE_REPORTS = Kind(
    collection="abuse_reports", prefix="abrp", list_key="abuse_reports", title="AbuseReport",
    ops=frozenset({"create", "get", "list", "update"}),
    describe="Reports of URLs served here as abusive; admins ban or clear each hostname.",
    fields=(
        Field("urls", list[str], f"the reported URLs (1 to {MAX_URLS}; not changed after)",
              create="required", check=_urls, default=list),
        Field("metadata", str, "arbitrary machine-readable data, at most 4096 bytes",
              update=True, default="", max_bytes=4096),
        Field("status", str, "PENDING, PARTIALLY_PROCESSED or PROCESSED", create="no",
              default="PENDING"),
        Field("hostnames", list[Hostname], "each hostname of the URLs and its status: "
              "PENDING, BANNED, UNBANNED or IGNORE; admins change them (PATCH)",
              create="no", update=True, check=_decisions, default=list),
    ),
    derive=_derive,
)

KINDS = (ABUSE_REPORTS,)


def banned(docs: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """Banned hostname -> the report that banned it (the newest decision of any report)."""
    out: dict[str, str] = {}
    for id_, doc in sorted(docs):  # (ids sort by time: a later report's decision wins)
        for h in doc.get("hostnames") or []:
            if h.get("status") == "BANNED":
                out[h["hostname"]] = id_
            elif h.get("status") == "UNBANNED":
                out.pop(h["hostname"], None)
    return out
