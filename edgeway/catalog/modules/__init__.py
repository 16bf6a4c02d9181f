"""The table of edge modules: for each, its request and response shapes, where it may be
attached, its rules and how its stored form renders.

A module is stored on its edge or route in request form (ids, not Refs); ``check`` validates
and normalises it (``at`` is the member path prefix for messages, such as ``backend.``);
``refs`` lists the ids it refers to; ``render`` turns the stored form into the response.
Attach one to a kind with ``field(module_name, on)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec

from edgeway.catalog import sealing
from edgeway.catalog.model import Context, Field, Link, Where
from edgeway.pki.seal import Sealer

# where a module or policy is attached; "http_endpoint": an HTTP(S) agent or cloud
# endpoint (its traffic policy has on_tcp_connect too), for policies only
On = Literal["https_edge", "route", "tcp_edge", "tls_edge", "http_endpoint"]
UInt32 = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]


class Session(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Members every end-user authentication module (OAuth, OIDC, SAML) shares."""

    enabled: bool = True
    options_passthrough: bool = False
    cookie_prefix: str = ""
    inactivity_timeout: UInt32 = 0
    maximum_duration: UInt32 = 0


@dataclass(frozen=True)
class Module:
    name: str
    request: type[msgspec.Struct]
    response: type[msgspec.Struct]
    on: frozenset[On]
    doc: str
    check: Callable[[dict[str, Any], Context, str], dict[str, Any]] | None = None
    link: Link | None = None
    refs: Callable[[dict[str, Any], str], list[tuple[str, str]]] | None = None
    render: Callable[[dict[str, Any], Where], dict[str, Any]] | None = None
    # per attachment point, when the shape differs (TLS termination on HTTPS edges)
    variants: tuple[tuple[On, type[msgspec.Struct]], ...] = ()
    # a check that depends on the attachment point (traffic policy phases)
    check_on: Callable[[dict[str, Any], Context, str, On], dict[str, Any]] | None = None
    # its secret members (paths in its value, ``*``: every key): stored sealed, shown masked
    secrets: tuple[sealing.Path, ...] = ()

    def request_for(self, on: On) -> type[msgspec.Struct]:
        return dict(self.variants).get(on, self.request)


REGISTRY: dict[str, Module] = {}


def register(*modules: Module) -> None:
    for m in modules:
        REGISTRY[m.name] = m


def field(name: str, on: On) -> Field:
    """The member of an edge or route kind that carries module ``name``."""
    m = REGISTRY[name]
    assert on in m.on, (name, on)
    at = f"{name}."

    def check(value: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if m.check_on is not None:
            return m.check_on(value, ctx, at, on)
        return m.check(value, ctx, at) if m.check else value

    def refs(value: dict[str, Any]) -> list[tuple[str, str]]:
        return m.refs(value, at) if m.refs else []

    def present(value: dict[str, Any], where: Where) -> dict[str, Any]:
        shown = m.render(value, where) if m.render else value
        return sealing.mask(shown, m.secrets) if m.secrets else shown

    return Field(name, m.request_for(on) | None, m.doc, update=True, null_is_unset=True,
                 out_type=m.response | None, check=check, link=m.link,
                 refs=refs if m.refs else None, present=present)


def context(name: str) -> str:
    """What module ``name``'s secrets are sealed for (a sealed value opens only there)."""
    return f"module {name} secret"


def sealed(doc: dict[str, Any], ctx: Context, old: dict[str, Any] | None,
           names: tuple[str, ...]) -> dict[str, Any]:
    """The modules among ``names`` that this write sets, with their secrets sealed (a module
    the write leaves alone is the stored one: already sealed)."""
    out: dict[str, Any] = {}
    for name in names:
        m, value = REGISTRY[name], doc.get(name)
        if not m.secrets or not value or (old is not None and value is old.get(name)):
            continue
        out[name] = sealing.seal(value, (old or {}).get(name), m.secrets, ctx.sealer,
                                 context(name), f"{name}.")
    return out


def stored_plain(doc: dict[str, Any], sealer: Sealer,
                 names: tuple[str, ...]) -> dict[str, Any]:
    """The modules of a stored ``doc`` that hold secrets in the clear, sealed."""
    out: dict[str, Any] = {}
    for name in names:
        m, value = REGISTRY[name], doc.get(name)
        if m.secrets and isinstance(value, dict):
            done = sealing.seal_plain(value, m.secrets, sealer, context(name))
            if done is not None:
                out[name] = done
    return out


def opened(doc: dict[str, Any], sealer: Sealer,
           names: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """A stored ``doc`` with its modules' secrets opened (for the edge), and the members that
    could not be."""
    out, failed = dict(doc), []
    for name in names:
        m, value = REGISTRY[name], doc.get(name)
        if m.secrets and isinstance(value, dict):
            out[name], bad = sealing.opened(value, m.secrets, sealer, context(name))
            failed += [f"{name}.{b}" for b in bad]
    return out, failed


def load() -> None:
    from edgeway.catalog.modules import auth, http, policy, refs, tls, webhook

    for mod in (refs, tls, http, webhook, auth, policy):
        register(*mod.MODULES)


load()
