"""A credential's ACL applied to binds: ``*`` or no rules allow everything; ``bind:<target>``
allows that target (``host:port`` for TCP, the host name for HTTP and TLS, ``name=value`` for
labels), a leading ``*.`` in a rule's host matching any subdomain. The same rules for agents
and every other way in (the SSH gateway)."""

from __future__ import annotations

from edgeway.tunnel.binds import BindRefused


def text(acl: list[str]) -> str:
    return ", ".join(acl) or "*"


def require(acl: list[str], target: str) -> None:
    """BindRefused unless ``acl`` allows binding ``target``."""
    if not allows(acl, target):
        raise BindRefused(f"the credential's ACL ({text(acl)}) does not allow binding "
                          f"{target}")


def require_labels(acl: list[str], labels: dict[str, str]) -> None:
    if not allows_labels(acl, labels):
        raise BindRefused(f"the credential's ACL ({text(acl)}) does not allow the labels "
                          f"{labels}")


def _matches(rule: str, target: str) -> bool:
    if rule == target:
        return True
    host, _, port = target.rpartition(":") if ":" in target else (target, "", "")
    r_host, _, r_port = rule.rpartition(":") if ":" in rule else (rule, "", "")
    if r_port == port and r_host.startswith("*."):
        return host.endswith(r_host[1:])
    return False


def allows(acl: list[str], target: str) -> bool:
    """``*`` or no rules allow everything; ``bind:<target>`` allows that target, a leading
    ``*.`` in a rule's host matching any subdomain. Targets: ``host:port`` for TCP, the host
    name for HTTP and TLS."""
    if not acl or "*" in acl:
        return True
    return any(rule.startswith("bind:") and _matches(rule[5:], target) for rule in acl)


def ports(acl: list[str], host: str) -> set[int] | None:
    """The TCP ports on ``host`` that ``acl`` allows binding; None for any port."""
    if not acl or "*" in acl:
        return None
    out: set[int] = set()
    for rule in acl:
        port = rule.rpartition(":")[2]
        if rule.startswith("bind:") and port.isascii() and port.isdigit() \
                and _matches(rule[5:], f"{host}:{port}"):
            out.add(int(port))
    return out


def allows_labels(acl: list[str], labels: dict[str, str]) -> bool:
    """Label rules are ``bind:name=value``, either side ``*`` for any (``bind:*=one`` allows
    every label whose value is ``one``); every label of the tunnel must be allowed by one."""
    if not acl or "*" in acl:
        return True
    rules = [r[5:].partition("=") for r in acl if r.startswith("bind:") and "=" in r]
    return all(any(name in ("*", k) and value in ("*", v) for name, _, value in rules)
               for k, v in labels.items())
