"""Pure member checks shared by several kinds: names, ACL rules, CIDRs, byte lengths, ARNs.

Each check takes the submitted value and returns it normalised, or raises ``Invalid`` naming
the member and the rule it breaks.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from edgeway.errors import Invalid

_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_ACL_LABEL = re.compile(r"^(?:\*|[A-Za-z0-9][A-Za-z0-9_./-]{0,252})$")


def byte_limit(member: str, value: str, limit: int) -> None:
    size = len(value.encode())
    if size > limit:
        raise Invalid(member, f"must be at most {limit} bytes of UTF-8 (got {size})", 420)


INTERNAL = ".internal"


def internal(host: str) -> bool:
    """An internal endpoint's name (``api.internal``): never served by the public listeners,
    reached only through a traffic policy's ``forward-internal``."""
    return host.rstrip(".").lower().endswith(INTERNAL)


def domain_name(member: str, value: str, *, wildcard: bool = False, code: int = 448) -> str:
    """A lower-case ASCII (IDNA) host name with at least two labels; ``*.`` allowed if wildcard."""
    v = value.strip().rstrip(".").lower()
    star = v.startswith("*.")
    if star and not wildcard:
        raise Invalid(member, f"'{value}' must not be a wildcard name", code)
    rest = v[2:] if star else v
    try:
        ascii_name = rest.encode("idna").decode() if not rest.isascii() else rest
    except UnicodeError as exc:
        raise Invalid(member, f"'{value}' is not a valid domain name ({exc})", code) from None
    labels = ascii_name.split(".")
    if len(ascii_name) > 253 or len(labels) < 2 or not all(_LABEL.match(p) for p in labels):
        raise Invalid(member, f"'{value}' is not a valid fully qualified domain name: labels of "
                      "letters, digits and inner hyphens, 1 to 63 characters, at least two "
                      "labels", code)
    if labels[-1].isdigit():
        raise Invalid(member, f"'{value}' is not a domain name: the last label is numeric", code)
    if star and len(ascii_name) > 251:
        raise Invalid(member, f"'{value}' is too long: a domain name has at most 253 "
                      "characters, '*.' included", code)
    return ("*." if star else "") + ascii_name


def _acl_target(member: str, target: str) -> str:
    if "=" in target:
        key, _, value = target.partition("=")
        if not (_ACL_LABEL.match(key) and _ACL_LABEL.match(value)):
            raise Invalid(member, f"label rule 'bind:{target}' must be 'bind:<key>=<value>' where "
                          "key and value are '*' or label characters [A-Za-z0-9_./-]", 600)
        return target
    if target == "*":
        return target
    if ":" in target:
        host, _, port = target.rpartition(":")
        if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
            raise Invalid(member, f"address rule 'bind:{target}' needs a port from 1 to 65535", 600)
        return f"{_acl_host(member, host)}:{int(port)}"
    return domain_name(member, target, wildcard=True, code=600)


def host(member: str, value: str) -> str:
    """An IP address (v6 in brackets or bare) or a domain name."""
    try:
        return str(ipaddress.ip_address(value.strip("[]")))
    except ValueError:
        if value in ("localhost",):
            return value
        return domain_name(member, value)


def _acl_host(member: str, host: str) -> str:
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return domain_name(member, host, wildcard=True, code=600)


def acl_rules(rules: list[str], _ctx: Any = None) -> list[str]:
    """ACL rules: ``*`` or ``bind:<domain|*.domain|host:port|key=value>``; duplicates dropped."""
    out: list[str] = []
    for i, rule in enumerate(rules):
        member = f"acl[{i}]"
        if rule == "*":
            norm = rule
        elif rule.startswith("bind:") and len(rule) > 5:
            norm = "bind:" + _acl_target(member, rule[5:])
        else:
            raise Invalid(member, f"'{rule}' must be '*' or start with 'bind:' followed by a "
                          "domain, a wildcard domain, an address or a label", 600)
        if norm not in out:
            out.append(norm)
    return out


def cidr(member: str, value: str) -> str:
    """A network-aligned IPv4 or IPv6 CIDR, in canonical form."""
    text = value.strip()
    if "/" not in text:
        try:
            addr = ipaddress.ip_address(text)
        except ValueError:
            raise Invalid(member, f"'{value}' is not a CIDR such as 10.0.0.0/8 or "
                          "2001:db8::/32", 1406) from None
        raise Invalid(member, f"'{value}' has no prefix length; did you mean "
                      f"'{addr}/{addr.max_prefixlen}'?", 1413)
    try:
        return str(ipaddress.ip_network(text, strict=True))
    except ValueError:
        pass
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise Invalid(member, f"'{value}' is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32",
                      1406) from None
    raise Invalid(member, f"'{value}' is not network-aligned: host bits are set; did you "
                  f"mean '{net}'?", 1409)


def arn_pattern(service: str, resource: str) -> str:
    """The ARNs ``arn`` accepts, as a regular expression JSON Schema can carry too: partition
    aws, aws-cn or aws-us-gov; a region for regional services, none for IAM; a 12-digit
    account id; the resource type, then a name."""
    region = "" if service in GLOBAL_SERVICES else "[a-z]{2}(-[a-z]+)+-[0-9]"
    return (rf"^arn:aws(-cn|-us-gov)?:{service}:{region}:[0-9]{{12}}:"
            rf"{re.escape(resource)}[A-Za-z0-9_./+=,@:#*-]+$")


GLOBAL_SERVICES = frozenset({"iam"})


def arn(member: str, value: str, service: str, resource: str) -> str:
    """An AWS ARN of ``service`` whose resource part starts with ``resource``."""
    if not re.match(arn_pattern(service, resource), value):
        region = "" if service in GLOBAL_SERVICES else "<region such as us-east-1>"
        raise Invalid(member, f"'{value}' is not an ARN of the form arn:aws:{service}:{region}:"
                      f"<12-digit account id>:{resource}<name> (partition aws, aws-cn or "
                      f"aws-us-gov{'; IAM ARNs have no region' if not region else ''})", 236)
    return value


def https_url(member: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme != "https" or not parts.hostname:
        raise Invalid(member, f"'{value}' must be an absolute https:// URL", 236)
    return value


def non_empty(member: str, value: str, code: int = 215) -> str:
    if not value.strip():
        raise Invalid(member, "must not be empty", code)
    return value
