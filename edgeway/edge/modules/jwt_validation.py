"""The traffic policy's ``jwt-validation`` action: every token its ``http.tokens`` name must be
in the request (a header, with its prefix, or a member of a JSON or form body) and be a JWT
signed with one of ``jws.allowed_algorithms`` by a key of the JWKS at
``jws.keys.sources.additional_jkus``, issued by one of ``issuer.allow_list`` (exactly, as the
``iss`` claim says it) and, when ``audience.allow_list`` is given, for one of them; it must
not have expired (``exp``, and ``nbf`` when present, with 60 s of leeway). Otherwise the
request is answered 401 (``WWW-Authenticate: Bearer error="invalid_token"``). Checked by
PyJWT. The claims go to ``actions.ngrok.jwt_validation.tokens`` for the later rules.

Key sets are fetched when first needed and kept 15 minutes (``KeySets``); a token whose
``kid`` is in none of them fetches them again, at most once every 30 s. A key set URL is
``https://`` (``http://`` only on a loopback address), is fetched without redirects with a
10 s timeout and up to 1 MiB; one that cannot be fetched fails the requests that need it
(never lets them through) and is not asked again for 5 s (a set fetched before is used
meanwhile).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import structlog

from edgeway.edge import h1
from edgeway.edge.h1 import header
from edgeway.edge.hooks import Exchange, Hook, Verdict
from edgeway.edge.modules.policy_values import Unsupported, result
from edgeway.edge.pages import Fixed

log = structlog.get_logger()
ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256",
                        "ES384", "ES512", "EdDSA"})
LEEWAY = 60
KEEP = 15 * 60  # seconds a fetched key set is used
RETRY = 30  # seconds between fetches of a key set asked for a kid it lacks
FAILED = 5  # seconds a key set that could not be fetched is not asked for again
MAX_JWKS = 1 << 20
MAX_BODY = 1 << 20  # a body a token is read from
_BODY_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})


@dataclass(frozen=True)
class Token:
    type: str
    method: str  # header or body
    name: str
    prefix: str


def _obj(cfg: dict[str, Any], member: str) -> dict[str, Any]:
    """A member that is an object (``{}`` when it is not given)."""
    value = cfg.get(member)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Unsupported(f"{member}: an object")
    return value


def _values(cfg: dict[str, Any], member: str) -> tuple[str, ...]:
    items = _obj(cfg, member).get("allow_list")
    if items is None:
        return ()
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(
            i.get("value"), str) and i["value"] for i in items):
        raise Unsupported(f"{member}.allow_list: a list of {{value: <string>}}")
    return tuple(i["value"] for i in items)


def _jku(url: Any) -> str:
    parts = urlsplit(str(url))
    host = parts.hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if (parts.scheme == "https" and host) or (parts.scheme == "http" and loopback):
        return str(url)
    raise Unsupported(f"additional_jkus {url!r}: an https:// URL (http:// only on a loopback "
                      "address)")


def _tokens(cfg: dict[str, Any]) -> tuple[Token, ...]:
    listed = _obj(cfg, "http").get("tokens")
    if not isinstance(listed, list) or not listed:
        raise Unsupported("http.tokens: at least one token (type, method, name, prefix)")
    out = []
    for t in listed:
        if not isinstance(t, dict) or t.get("method", "header") not in ("header", "body") \
                or not isinstance(t.get("name"), str) or not t["name"]:
            raise Unsupported("http.tokens: each with method header or body and a name")
        out.append(Token(str(t.get("type", "jwt")), str(t.get("method", "header")),
                         t["name"], str(t.get("prefix") or "")))
    return tuple(out)


@dataclass(frozen=True)
class Validator(Hook):
    name = "jwt-validation"
    issuers: tuple[str, ...]
    audiences: tuple[str, ...]
    tokens: tuple[Token, ...]
    algorithms: tuple[str, ...]
    jkus: tuple[str, ...]
    keys: KeySets = field(compare=False)

    async def request(self, x: Exchange) -> Verdict:
        found, why = await self._found(x)
        checked: list[dict[str, Any]] = []
        for spec, raw in found:
            try:
                claims = await self.verify(raw)
            except (jwt.PyJWTError, KeyUnavailable) as exc:
                why = f"{spec.name}: {exc}"
                break
            checked.append({"type": spec.type, "claims": claims})
        if x.env is not None:
            result(x.env, "jwt_validation", {"tokens": checked, **(
                {"error": {"code": "invalid_token", "message": why}} if why else {})})
        if why:
            log.info("jwt_validation_refused", why=why)
            return Fixed(401, (("WWW-Authenticate", 'Bearer error="invalid_token"'),
                               ("Content-Type", "text/plain; charset=utf-8")),
                         b"A valid token is required.\n")
        return None

    async def _found(self, x: Exchange) -> tuple[list[tuple[Token, str]], str]:
        """Each token as sent, or why one is missing."""
        out: list[tuple[Token, str]] = []
        for spec in self.tokens:
            raw = await _read(x, spec)
            if not raw:
                return out, f"{spec.name}: no token"
            out.append((spec, raw))
        return out, ""

    async def verify(self, raw: str) -> dict[str, Any]:
        head = jwt.get_unverified_header(raw)
        alg = head.get("alg")
        if alg not in self.algorithms:
            raise jwt.InvalidAlgorithmError(f"algorithm {alg!r} is not allowed")
        key = await self.keys.find(self.jkus, head.get("kid"), str(alg))
        claims: dict[str, Any] = jwt.decode(
            raw, key, algorithms=[str(alg)], issuer=list(self.issuers),
            audience=list(self.audiences) or None, leeway=LEEWAY,
            options={"require": ["exp", "iss"], "verify_aud": bool(self.audiences)})
        return claims


async def _read(x: Exchange, spec: Token) -> str:
    if spec.method == "header":
        value = header(x.req.headers, spec.name.lower().encode()).decode("latin-1")
        if spec.prefix:
            if not value.lower().startswith(spec.prefix.lower()):
                return ""
            value = value[len(spec.prefix):]
        return value.strip()
    if x.req.method not in _BODY_METHODS:
        return ""
    if x.body is None:
        x.body = await x.read_body(MAX_BODY)
        if x.body is None:
            return ""
        x.req = h1.with_length(x.req, len(x.body))
    kind = header(x.req.headers, b"content-type").split(b";")[0].strip().lower()
    try:
        if kind == b"application/json":
            doc = json.loads(x.body)
            found = doc.get(spec.name) if isinstance(doc, dict) else None
            return found if isinstance(found, str) else ""
        if kind == b"application/x-www-form-urlencoded":
            return (parse_qs(x.body.decode()).get(spec.name) or [""])[0]
    except (ValueError, UnicodeDecodeError):
        return ""
    return ""


class KeyUnavailable(Exception):
    pass


class KeySets:
    """JWKS documents by URL, fetched when first needed and kept ``KEEP`` seconds (one fetch
    at a time per URL; the requests that need it meanwhile wait for it)."""

    def __init__(self) -> None:
        self._sets: dict[str, tuple[float, jwt.PyJWKSet]] = {}
        self._tried: dict[str, float] = {}  # the last refetch for a kid not in it
        self._failed: dict[str, float] = {}  # the last fetch that failed
        self._locks: dict[str, asyncio.Lock] = {}
        self._http: httpx.AsyncClient | None = None

    async def find(self, urls: tuple[str, ...], kid: Any, alg: str) -> Any:
        """The key to verify a token of ``kid`` with (any key of the algorithm's type when the
        token names none), from the first key set that has it."""
        unavailable = []
        for again in (False, True):
            for url in urls:
                try:
                    keys = await self._get(url, again)
                except KeyUnavailable as exc:
                    unavailable.append(str(exc))
                    continue
                for k in keys.keys:
                    if (kid is None or k.key_id == kid) and _fits(k, alg):
                        return k.key
        raise KeyUnavailable(unavailable[0] if unavailable else
                             f"no key {kid!r} for {alg} in the key sets")

    async def _get(self, url: str, again: bool) -> jwt.PyJWKSet:
        """The key set at ``url``: the one kept, unless it is older than ``KEEP`` or, when
        ``again`` (a token's kid is in none), no refetch for that was made in ``RETRY`` s."""
        now = time.monotonic()
        kept = self._sets.get(url)
        if kept is not None and now - kept[0] < KEEP and not (
                again and now - self._tried.get(url, -RETRY) >= RETRY):
            return kept[1]
        if kept is None and now - self._failed.get(url, -FAILED) < FAILED:
            raise KeyUnavailable(f"the key set {url} cannot be fetched")
        async with self._locks.setdefault(url, asyncio.Lock()):
            kept = self._sets.get(url)
            if kept is not None and kept[0] > now:  # (fetched meanwhile)
                return kept[1]
            if kept is None and self._failed.get(url, -FAILED) > now:
                raise KeyUnavailable(f"the key set {url} cannot be fetched")
            if again:
                self._tried[url] = now
            try:
                fetched = await self._fetch(url)
            except (httpx.HTTPError, ValueError, jwt.PyJWTError) as exc:
                log.warning("jwks_unavailable", url=url, error=str(exc) or type(exc).__name__)
                if kept is not None:
                    return kept[1]
                self._failed[url] = time.monotonic()
                raise KeyUnavailable(f"the key set {url} cannot be fetched") from None
            self._sets[url] = (time.monotonic(), fetched)
            return fetched

    async def _fetch(self, url: str) -> jwt.PyJWKSet:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=10, follow_redirects=False)
        async with self._http.stream("GET", url) as r:
            r.raise_for_status()
            body = b""
            async for chunk in r.aiter_bytes():
                body += chunk
                if len(body) > MAX_JWKS:
                    raise ValueError(f"the key set is over {MAX_JWKS} bytes")
        doc = json.loads(body)
        if not isinstance(doc, dict):
            raise ValueError("the key set is not a JSON object")
        return jwt.PyJWKSet.from_dict(doc)


def _fits(key: jwt.PyJWK, alg: str) -> bool:
    kty = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}[alg[:2]]
    named = getattr(key, "algorithm_name", None)
    return key.key_type == kty and (named in (None, alg) or alg.startswith("PS"))


SHARED = KeySets()  # (the server's: key sets are public, one cache serves every policy)


def compile(cfg: dict[str, Any], keys: KeySets = SHARED) -> Validator:
    """The action's validator; ``Unsupported`` naming what its configuration lacks."""
    issuers = _values(cfg, "issuer")
    if not issuers:
        raise Unsupported("issuer.allow_list: at least one issuer")
    audiences = _values(cfg, "audience")
    if "audience" in cfg and not audiences:
        raise Unsupported("audience.allow_list: at least one audience when audience is given")
    jws = _obj(cfg, "jws")
    algorithms = jws.get("allowed_algorithms") or []
    if not isinstance(algorithms, list) or not algorithms \
            or not set(map(str, algorithms)) <= ALGORITHMS:
        raise Unsupported("jws.allowed_algorithms: at least one of "
                          + ", ".join(sorted(ALGORITHMS)))
    jkus = _obj(_obj(jws, "keys"), "sources").get("additional_jkus")
    if not isinstance(jkus, list) or not jkus:
        raise Unsupported("jws.keys.sources.additional_jkus: at least one key set URL")
    urls = tuple(_jku(u) for u in jkus)
    return Validator(issuers, audiences, _tokens(cfg), tuple(map(str, algorithms)), urls, keys)
