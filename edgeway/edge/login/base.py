"""End-user logins at the edge, sans I/O: what the ``oidc``, ``oauth`` and ``saml`` modules
share, at the bottom of the ``login`` package (its imports run one way: ``base``, then
``sessions`` and ``providers``, ``flow``, ``code_flow``, the flows ``oidc``, ``oauth`` and
``saml`` (redirects to the provider, code exchanges, assertions), and ``gate`` on top, which
runs them and keeps the sessions; the modules and the traffic policy use the gate).

- ``Common``: the members every login module has (cookie prefix, session limits, OPTIONS
  passthrough, e-mail rules), the key of what it protects (route or tunnel id) and its
  ``realm``: a session cookie made for one realm is worth nothing in another (another route,
  or the same route after its provider or rules changed).
- Signed values (``sign``/``unsign``): the session cookie and the login ``state`` carry JSON
  signed with a key of this platform, so the edge keeps no per-login memory.
- The edge's own paths live under ``/.edgeway/<module>/``: ``callback`` (OIDC, OAuth),
  ``logout``, and for SAML ``/.edgeway/saml/<route id>`` (metadata) with ``/acs`` and ``/slo``.
  ``own_path`` tells the router which route such a request belongs to.
- ``Gate``: the hook every login module compiles to; it hands the request to the gate.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from edgeway.edge.h1 import Headers, header
from edgeway.edge.hooks import Exchange, Hook, Verdict
from edgeway.edge.hosts import request_host
from edgeway.edge.pages import Fixed, page

PREFIX = "/.edgeway/"
IDENTITY = (b"edgeway-auth-user-id", b"edgeway-auth-user-email", b"edgeway-auth-user-name")
DEFAULT_MAXIMUM = 24 * 3600
LOGIN_TTL = 600  # seconds from the redirect to the provider to its answer
KINDS = ("oidc", "oauth", "saml")


@dataclass(frozen=True)
class Identity:
    """Who the provider says logged in; ``facts`` are what rules look at (teams,
    organizations, groups)."""
    id: str
    email: str = ""
    name: str = ""
    username: str = ""
    facts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Common:
    kind: str  # oidc, oauth or saml
    key: str  # the route or tunnel id the module belongs to
    realm: str  # sessions are valid only in the realm they were made in
    prefix: str  # of the cookie names
    inactivity: int  # seconds without a request that end a session (0: no limit)
    maximum: int  # seconds a session lasts at most
    options_passthrough: bool
    allow_emails: tuple[str, ...] = ()  # lower case
    allow_domains: tuple[str, ...] = ()

    # Cookie names start with ``__Host-``: a browser keeps such a cookie to the host that
    # set it (Secure, Path=/, no Domain), so a site on a sibling name (another tunnel under
    # the same domain) cannot plant a session or a login state of its own choosing.
    @property
    def cookie(self) -> str:
        return f"__Host-{self.prefix}session"

    @property
    def state_cookie(self) -> str:
        return f"__Host-{self.prefix}{self.kind}_state"

    @property
    def email_rules(self) -> bool:
        return bool(self.allow_emails or self.allow_domains)

    def email_allowed(self, email: str) -> bool:
        email = email.lower()
        return bool(email) and (email in self.allow_emails
                                or email.rpartition("@")[2] in self.allow_domains)


def fingerprint(*parts: Any) -> str:
    """A short digest of what a session's validity depends on."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def common(kind: str, module: dict[str, Any], key: str, *realm: Any,
           emails: Any = (), domains: Any = ()) -> Common:
    """The shared members of a login module document; ``realm``: what else its sessions are
    bound to (provider, client, rules)."""
    allow_emails = tuple(sorted(str(e).strip().lower() for e in emails or ()))
    allow_domains = tuple(sorted(str(d).strip().lower().lstrip("@") for d in domains or ()))
    return Common(kind, key, f"{kind}:{key}:" + fingerprint(*realm, allow_emails,
                                                              allow_domains),
                  str(module.get("cookie_prefix") or "edgeway."),
                  int(module.get("inactivity_timeout") or 0),
                  int(module.get("maximum_duration") or DEFAULT_MAXIMUM),
                  bool(module.get("options_passthrough")), allow_emails, allow_domains)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(key: bytes, value: dict[str, Any]) -> str:
    """``value`` as a cookie- and URL-safe string only ``key`` could have made."""
    data = _b64(json.dumps(value, separators=(",", ":")).encode())
    return data + "." + _b64(hmac.new(key, data.encode(), hashlib.sha256).digest())


def unsign(key: bytes, token: str) -> dict[str, Any] | None:
    """The value ``token`` carries if ``sign`` made it with ``key``, else None (whatever the
    client sent: a cookie or a query parameter, any characters)."""
    data, _, mac = token.partition(".")
    want = _b64(hmac.new(key, data.encode("utf-8", "replace"), hashlib.sha256).digest())
    if not mac or not mac.isascii() or not hmac.compare_digest(mac, want):
        return None
    return peek(data)


def peek(data: str) -> dict[str, Any] | None:
    """The JSON object in the first part of a signed value, unverified."""
    try:
        value = json.loads(unb64(data.partition(".")[0]))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def pkce_verifier(key: bytes, browser: str, nonce: str) -> str:
    """The PKCE code verifier of a login (RFC 7636), derived from the browser's login cookie:
    the edge keeps nothing, and only that browser's callback can complete the exchange."""
    return _b64(hmac.new(key, f"pkce {browser} {nonce}".encode(), hashlib.sha256).digest())


def pkce_challenge(verifier: str) -> str:
    return _b64(hashlib.sha256(verifier.encode()).digest())


def cookies(headers: Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers:
        if name.lower() == b"cookie":
            for part in value.decode("latin-1").split(";"):
                k, _, v = part.strip().partition("=")
                out.setdefault(k, v)
    return out


def set_cookie(name: str, value: str, max_age: int | None = None, same_site: str = "Lax"
               ) -> tuple[str, str]:
    """A host-only cookie for HTTPS; ``SameSite=None`` only for a login state that must come
    along with the provider's cross-site POST (SAML)."""
    age = f"; Max-Age={max_age}" if max_age is not None else ""
    return ("Set-Cookie", f"{name}={value}; Path=/; Secure; HttpOnly; SameSite={same_site}{age}")


def redirect(location: str, *extra: tuple[str, str]) -> Fixed:
    return Fixed(302, (("Location", location), ("Cache-Control", "no-store"), *extra), b"")


def signed_out(c: Common) -> Fixed:
    return Fixed(200, (("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control",
                                                                      "no-store"),
                       set_cookie(c.cookie, "", 0)), b"Signed out.\n")


def refused(title: str, detail: str, status: int = 403) -> Fixed:
    return page(status, title, detail, 4015)


def local_target(target: Any) -> str:
    """A path on this host to send the browser back to (never another site): printable
    ASCII only (a browser drops tabs and line breaks from a URL, so ``/<TAB>/evil`` would
    be ``//evil``; and a line break in a header splits it)."""
    text = str(target or "/")
    if not text.startswith("/") or text.startswith("//") or "\\" in text \
            or not text.isascii() or not text.isprintable() or " " in text:
        return "/"
    return text


def site_host(headers: Headers) -> str:
    """The request's host as ``host[:port]`` for URLs back to this site: the name it was
    routed by, and the port only if it is one (a Host header cannot smuggle another
    authority, such as ``a.example.com:443@evil.example``, into a redirect)."""
    raw = header(headers, b"host").decode("latin-1")
    port = raw.rpartition(":")[2] if not raw.endswith("]") else ""
    host = request_host(headers)
    return f"{host}:{port}" if ":" in raw and port.isascii() and port.isdigit() else host


def query(target: bytes) -> dict[str, list[str]]:
    return parse_qs(urlsplit(target.decode("latin-1")).query)


@dataclass(frozen=True)
class Answer:
    """A provider's answer at a login callback: its query, and the login's signed state."""
    params: dict[str, list[str]]
    state: dict[str, Any]

    def one(self, name: str) -> str:
        return (self.params.get(name) or [""])[0]


def callback(key: bytes, c: Common, target: bytes, headers: Headers) -> Answer | Fixed:
    """The provider's answer to a login this browser started on this route, not expired and
    not an error; else the page that says why."""
    params = query(target)
    state = unsign(key, (params.get("state") or [""])[0])
    browser = cookies(headers).get(c.state_cookie)
    if state is None or state.get("x", 0) < time.time() or state.get("b") != browser \
            or state.get("k") != c.key:
        return refused("Login failed", "The login answer does not belong to a login started "
                       "in this browser, or came too late; start again.", 400)
    answer = Answer(params, state)
    if answer.one("error"):
        return refused("Login refused", f"The identity provider answered "
                       f"{answer.one('error')}: {answer.one('error_description')}")
    return answer


def own_path(target: bytes) -> tuple[str, str] | None:
    """For a request to one of the edge's login paths: the module kind and the route key it
    names ("" when any login route of that kind may answer), else None."""
    text = target.decode("latin-1")
    path = text.split("?", 1)[0]
    if not path.startswith(PREFIX):
        return None
    kind, _, rest = path[len(PREFIX):].partition("/")
    if kind not in KINDS:
        return None
    if kind == "saml" and rest not in ("logout", ""):
        return kind, rest.split("/", 1)[0]
    if rest == "callback":  # the state names the route the login started on
        state = peek((query(target.split(b"#", 1)[0]).get("state") or [""])[0])
        return kind, str(state.get("k", "")) if state else ""
    return kind, ""


class Gate(Hook):
    """The login on traffic: a request without a valid session is sent to log in; the edge's
    own login paths are answered by it; a signed-in user's request goes on with their
    identity in ``Edgeway-Auth-User-*`` headers (a client's own are dropped)."""
    @property
    def kind(self) -> str:
        """The module: oidc, oauth or saml (also the hook's name)."""
        return self.name

    @property
    def common(self) -> Common:
        raise NotImplementedError

    async def request(self, x: Exchange) -> Verdict:
        gate = x.services.login
        if gate is None:  # (only the HTTPS listener has a gate: logins need HTTPS)
            return page(503, "Not available", "Logins need HTTPS.", 4008)
        outcome = await gate.check(self, x)
        if isinstance(outcome, Fixed):
            return outcome
        x.req = outcome
        return None


class ProviderError(Exception):
    """The identity provider could not be reached or answered wrongly (502 for this
    request; the session, if any, stays)."""
