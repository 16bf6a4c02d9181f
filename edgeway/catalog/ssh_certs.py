"""SSH host and user certificates, signed on create by an SSH certificate authority.

The member checks normalise what is sent (public key, principals, RFC 3339 validity bounds,
critical options, extensions); ``derive`` fills the defaults (valid from now, for one year after
``valid_after``; the standard OpenSSH extension set for user certificates); ``resolve`` opens the
CA's sealed key inside the write transaction and signs. Certificates are immutable afterwards:
only ``description`` and ``metadata`` change.
"""

from __future__ import annotations

import ipaddress
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from edgeway.catalog.model import Context, Fetch, Field, Kind, Link, standard
from edgeway.catalog.ssh import CA_SEAL_CONTEXT, parsed_key, public_key_member
from edgeway.errors import ApiError, Invalid
from edgeway.pki import ssh

DEFAULT_EXTENSIONS = {"permit-X11-forwarding": "", "permit-agent-forwarding": "",
                      "permit-port-forwarding": "", "permit-pty": "", "permit-user-rc": ""}
FLAG_EXTENSIONS = (*DEFAULT_EXTENSIONS, "no-touch-required")
CRITICAL_OPTIONS = ("force-command", "source-address")
MAX_PRINCIPALS = 256
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
_TS = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
                 r"(?:\.[0-9]{1,9})?([Zz]|[+-][0-9]{2}:[0-9]{2})?")
_HOST = re.compile(r"(?:\*\.)?(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*"
                   r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_CUSTOM_EXTENSION = re.compile(r"[A-Za-z0-9._-]{1,64}@[A-Za-z0-9.-]{1,190}")


def _short(value: str) -> str:
    return value if len(value) <= 64 else value[:61] + "..."


def _zone(text: str) -> timezone:
    if text in ("Z", "z"):
        return UTC
    hours, minutes = int(text[1:3]), int(text[4:6])
    if minutes > 59:
        raise ValueError("bad offset")
    sign = -1 if text[0] == "-" else 1
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def parse_time(member: str, value: str) -> datetime | None:
    """RFC 3339 to UTC; None when unset: empty, or the year-1 zero time clients send."""
    text = value.strip()
    m = _TS.fullmatch(text)
    if not text or (m and m[1] == "0001"):
        return None
    example = "an RFC 3339 timestamp such as 2026-01-01T00:00:00Z"
    if m is None:
        raise Invalid(member, f"'{_short(value)}' is not {example}", 241)
    if m[7] is None:
        raise Invalid(member, f"'{_short(value)}' has no time zone: end it with Z or an "
                      "offset such as +02:00", 241)
    try:
        y, mo, d, h, mi, sec = (int(m[i]) for i in range(1, 7))
        t = datetime(y, mo, d, h, mi, sec, tzinfo=_zone(m[7])).astimezone(UTC)
    except (ValueError, OverflowError):
        raise Invalid(member, f"'{_short(value)}' is not a valid date and time", 241) from None
    if not EARLIEST <= t <= LATEST:
        raise Invalid(member, "must lie between 1970-01-01T00:00:00Z and "
                      "9999-12-31T23:59:59Z", 241)
    return t


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time_member(member: str) -> Any:
    def check(value: str, _ctx: Context) -> str:
        t = parse_time(member, value)
        return rfc3339(t) if t else ""
    return check


def _one_year_after(t: datetime) -> datetime:
    if t.year >= LATEST.year:
        return LATEST
    try:
        return t.replace(year=t.year + 1)
    except ValueError:  # 29 February
        return t.replace(year=t.year + 1, day=28)


def _validity(doc: dict[str, Any], ctx: Context) -> dict[str, str]:
    start = parse_time("valid_after", doc.get("valid_after") or "") or ctx.now
    end = parse_time("valid_until", doc.get("valid_until") or "") or _one_year_after(start)
    if end <= start:
        raise Invalid("valid_until", f"{rfc3339(end)} must be after valid_after "
                      f"({rfc3339(start)})", 241)
    return {"valid_after": rfc3339(start), "valid_until": rfc3339(end)}


def _host_principal(member: str, value: str) -> str:
    text = value.strip().lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(text.strip("[]")))
    except ValueError:
        pass
    if len(text) > 253 or not _HOST.fullmatch(text):
        raise Invalid(member, f"'{_short(value)}' is not a host name (letters, digits, '-', "
                      "'_', dots; may start with '*.') or an IP address", 215)
    return text


def _user_principal(member: str, value: str) -> str:
    if (not value or len(value.encode()) > 255 or " " in value or "," in value
            or not value.isprintable()):
        raise Invalid(member, f"'{_short(value)}' is not a user name: 1 to 255 bytes without "
                      "spaces, commas or control characters", 215)
    return value


def _principals(host: bool) -> Any:
    one = _host_principal if host else _user_principal

    def check(value: list[str], _ctx: Context) -> list[str]:
        if len(value) > MAX_PRINCIPALS:
            raise Invalid("principals", f"at most {MAX_PRINCIPALS} principals", 215)
        out: list[str] = []
        for i, item in enumerate(value):
            norm = one(f"principals[{i}]", item)
            if norm not in out:
                out.append(norm)
        return out
    return check


def _source_address(value: str) -> str:
    member, out = "critical_options.source-address", []
    for item in value.split(","):
        text = item.strip()
        try:
            net = (ipaddress.ip_network(text) if "/" in text
                   else ipaddress.ip_address(text))
        except ValueError:
            raise Invalid(member, f"'{_short(text)}' is not an IP address or a network-aligned "
                          "CIDR; give a comma-separated list such as "
                          "'10.0.0.0/8,192.0.2.7'", 215) from None
        out.append(str(net))
    return ",".join(out)


def _critical_options(value: dict[str, str], _ctx: Context) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, text in value.items():
        if name not in CRITICAL_OPTIONS:
            raise Invalid("critical_options", f"'{_short(name)}' is not a critical option; "
                          "the valid ones are force-command and source-address", 215)
        if name == "source-address":
            out[name] = _source_address(text)
        elif not text.strip() or any(not c.isprintable() and c != "\t" for c in text):
            raise Invalid("critical_options.force-command", "must be a non-empty command "
                          "without control characters", 215)
        else:
            out[name] = text
    return out


def _extensions(value: dict[str, str], _ctx: Context) -> dict[str, str]:
    for name, text in value.items():
        if name in FLAG_EXTENSIONS:
            if text:
                raise Invalid(f"extensions.{name}", "is a flag; its value must be empty", 215)
        elif not _CUSTOM_EXTENSION.fullmatch(name):
            raise Invalid("extensions", f"'{_short(name)}' is neither a standard extension ("
                          f"{', '.join(FLAG_EXTENSIONS)}) nor a custom one named "
                          "'name@domain'", 215)
    return dict(value)


def _derive(host: bool) -> Any:
    def derive(doc: dict[str, Any], ctx: Context,
               old: dict[str, Any] | None) -> dict[str, Any]:
        if old is not None:
            return {}
        out: dict[str, Any] = _validity(doc, ctx)
        out["key_type"] = parsed_key("public_key", doc["public_key"]).key_type
        if not host:
            out["extensions"] = doc.get("extensions") or dict(DEFAULT_EXTENSIONS)
        return out
    return derive


def _open_ca(ca: dict[str, Any], ctx: Context) -> ssh.PrivateKey:
    try:
        return ssh.load_private(ctx.sealer.open(ca["private_key"], CA_SEAL_CONTEXT))
    except ValueError:  # SealError, or a damaged key
        raise ApiError("The SSH certificate authority's private key cannot be opened: the "
                       "platform secret key differs from the one it was sealed with.", None,
                       status=500) from None


def _stored_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


async def _sign(doc: dict[str, Any], ctx: Context, fetch: Fetch, host: bool) -> dict[str, Any]:
    ca_id = doc["ssh_certificate_authority_id"]
    ca = await fetch("ssh_certificate_authorities", ca_id)
    if ca is None:  # the reference check ran in this transaction; kept for clarity
        raise Invalid("ssh_certificate_authority_id", f"'{ca_id}' does not exist", 228)
    subject = parsed_key("public_key", doc["public_key"])
    req = ssh.CertRequest(
        public_key=subject.key, host=host, principals=list(doc["principals"]),
        valid_after=_stored_time(doc["valid_after"]),
        valid_before=_stored_time(doc["valid_until"]),
        key_id=f"edgeway-{'host' if host else 'user'}:{subject.fingerprint}",
        critical_options=dict(doc.get("critical_options") or {}),
        extensions=dict(doc.get("extensions") or {}),
    )
    return {"certificate": ssh.sign(_open_ca(ca, ctx), req)}


async def _sign_host(doc: dict[str, Any], ctx: Context, fetch: Fetch) -> dict[str, Any]:
    return await _sign(doc, ctx, fetch, True)


async def _sign_user(doc: dict[str, Any], ctx: Context, fetch: Fetch) -> dict[str, Any]:
    return await _sign(doc, ctx, fetch, False)


def _fields(host: bool) -> tuple[Field, ...]:
    who = "host names and/or IP addresses" if host else "user names"
    user_only = () if host else (
        Field("critical_options", dict[str, str], "force-command and/or source-address "
              "(comma-separated CIDRs)", default=dict, check=_critical_options),
        Field("extensions", dict[str, str], "OpenSSH extensions; none given means "
              + ", ".join(DEFAULT_EXTENSIONS), default=dict, check=_extensions),
    )
    return (
        *standard(),
        Field("public_key", str, "the public key to certify, an OpenSSH authorized-keys line "
              "(RFC 4716 and PEM also accepted)", create="required", check=public_key_member),
        Field("key_type", str, "rsa, ecdsa or ed25519; derived from public_key", create="no",
              default=""),
        Field("ssh_certificate_authority_id", str, "the SSH CA that signs the certificate",
              create="required",
              link=Link(("ssh_certificate_authorities",), "restrict", code=228)),
        Field("principals", list[str], f"{who} the certificate is valid for; empty means all",
              default=list, check=_principals(host)),
        *user_only,
        Field("valid_after", str, "start of validity, RFC 3339; default now", default="",
              check=_time_member("valid_after")),
        Field("valid_until", str, "end of validity, RFC 3339; default one year after "
              "valid_after", default="", check=_time_member("valid_until")),
        Field("certificate", str, "the signed certificate, an authorized-keys line for a "
              "-cert.pub file", create="no", default=""),
    )


SSH_HOST_CERTIFICATES = Kind(
    collection="ssh_host_certificates", prefix="shcrt", list_key="ssh_host_certificates",
    title="SSHHostCertificate",
    describe="SSH host certificates signed by an SSH CA, for sshd's HostCertificate.",
    fields=_fields(True), derive=_derive(True), resolve=_sign_host,
)

SSH_USER_CERTIFICATES = Kind(
    collection="ssh_user_certificates", prefix="sucrt", list_key="ssh_user_certificates",
    title="SSHUserCertificate",
    describe="SSH user certificates signed by an SSH CA, for sshd's TrustedUserCAKeys.",
    fields=_fields(False), derive=_derive(False), resolve=_sign_user,
)

KINDS = (SSH_HOST_CERTIFICATES, SSH_USER_CERTIFICATES)
