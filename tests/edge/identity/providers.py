"""Local OAuth providers for the login tests, on loopback, each a real HTTP server (stdlib,
in a thread) speaking the protocol of the provider it stands in for:

- ``code_host_a`` (GitHub's paths and shapes): ``/login/oauth/authorize`` (a sign-in form; its
  POST redirects to the client's registered callback with a code), ``/login/oauth/
  access_token`` (client secret, code, redirect URI and PKCE verifier checked; answers JSON
  when asked, else form-encoded; errors as 200 with ``error``, as GitHub does), the user API
  ``/user``, ``/user/emails``, ``/user/teams`` and ``/user/orgs`` (paged with ``Link``
  headers) for bearer tokens;
- ``search_a`` (Google's OpenID-style paths): ``/o/oauth2/v2/auth``, ``/token`` (also the
  refresh grant; access tokens expire), ``/v1/userinfo``.

Tests change the provider's state (revoke a user, drop a team membership) and read what it
was asked (scopes, PKCE)."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from tests.server import free_port
from tests.stub_http import Answer, StubHandler, serving

PATHS = {
    "code_host_a": {"authorize": "/login/oauth/authorize",
                    "token": "/login/oauth/access_token", "user": "/user",
                    "emails": "/user/emails", "teams": "/user/teams",
                    "organizations": "/user/orgs"},
    "search_a": {"authorize": "/o/oauth2/v2/auth", "token": "/token",
                 "user": "/v1/userinfo"},
}


@dataclass
class User:
    login: str
    id: int
    name: str
    email: str
    verified: bool = True
    teams: list[tuple[str, str, int]] = field(default_factory=list)  # (org, slug, id)
    orgs: list[str] = field(default_factory=list)


@dataclass
class Grant:
    client: str
    redirect_uri: str
    login: str
    challenge: str
    method: str
    scope: str
    expires: float


class Provider:
    def __init__(self, style: str) -> None:
        self.style = style
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.clients: dict[str, tuple[str, tuple[str, ...]]] = {}  # id -> secret, callbacks
        self.users: dict[str, User] = {}
        self.codes: dict[str, Grant] = {}
        self.tokens: dict[str, tuple[str, float]] = {}  # token -> login, expiry
        self.refresh: dict[str, str] = {}  # refresh token -> login
        self.asked: list[dict[str, str]] = []  # every authorization request's parameters
        self.token_ttl = 3600.0
        self.refreshed = 0  # refresh grants answered
        self.page_size = 100
        self.lock = threading.Lock()

    def endpoints(self) -> list[str]:
        """``--oauth-endpoint`` values pointing the edge here."""
        return [f"{self.style}.{name}={self.url}{path}"
                for name, path in PATHS[self.style].items()]

    def client(self, client_id: str, secret: str, *callbacks: str) -> None:
        self.clients[client_id] = (secret, callbacks)

    def add(self, user: User) -> None:
        self.users[user.login] = user

    def revoke(self, login: str) -> None:
        """The user is gone: their tokens (and refresh tokens) stop working."""
        with self.lock:
            self.users.pop(login, None)
            for table in (self.tokens, self.refresh):
                for token in [t for t, v in table.items()
                              if (v[0] if isinstance(v, tuple) else v) == login]:
                    del table[token]

    # -- protocol --------------------------------------------------------------------------

    def authorize_form(self, q: dict[str, str]) -> Answer:
        known = self.clients.get(q.get("client_id", ""))
        if known is None or not any(q.get("redirect_uri", "").startswith(c)
                                    for c in known[1]):
            return 400, {}, b"unknown client or redirect_uri not registered"
        self.asked.append(q)
        hidden = "".join(f'<input type="hidden" name="{html.escape(k)}" '
                         f'value="{html.escape(v)}">' for k, v in q.items())
        page = (f'<!doctype html><title>Sign in</title><form method="post" action='
                f'"{PATHS[self.style]["authorize"]}">{hidden}<label>User <input name="login">'
                '</label><button type="submit">Sign in</button></form>')
        return 200, {"Content-Type": "text/html"}, page.encode()

    def authorize(self, q: dict[str, str]) -> Answer:
        known = self.clients.get(q.get("client_id", ""))
        if known is None or not any(q.get("redirect_uri", "").startswith(c)
                                    for c in known[1]) or q.get("login") not in self.users:
            return 400, {}, b"refused"
        code = secrets.token_urlsafe(12)
        self.codes[code] = Grant(q["client_id"], q["redirect_uri"], q["login"],
                                 q.get("code_challenge", ""),
                                 q.get("code_challenge_method", ""), q.get("scope", ""),
                                 time.time() + 60)
        location = q["redirect_uri"] + ("&" if "?" in q["redirect_uri"] else "?") + \
            urlencode({"code": code, "state": q.get("state", "")})
        return 302, {"Location": location}, b""

    def _client_ok(self, q: dict[str, str], basic: str) -> bool:
        if basic:
            cid, _, secret = base64.b64decode(basic).decode().partition(":")
            q = {**q, "client_id": cid, "client_secret": secret}
        known = self.clients.get(q.get("client_id", ""))
        return known is not None and secrets.compare_digest(known[0],
                                                            q.get("client_secret", ""))

    def _issue(self, login: str) -> dict[str, Any]:
        token = secrets.token_urlsafe(16)
        self.tokens[token] = (login, time.time() + self.token_ttl)
        out: dict[str, Any] = {"access_token": token, "token_type": "bearer"}
        if self.style == "search_a":
            refresh = secrets.token_urlsafe(16)
            self.refresh[refresh] = login
            out |= {"expires_in": int(self.token_ttl), "refresh_token": refresh}
        return out

    def token(self, q: dict[str, str], basic: str) -> dict[str, Any]:
        if not self._client_ok(q, basic):
            return {"error": "invalid_client"}
        with self.lock:
            if q.get("grant_type") == "refresh_token":  # one use each: rotated, as
                login = self.refresh.pop(q.get("refresh_token", ""), None)  # RFC 9700 asks
                if login not in self.users:
                    return {"error": "invalid_grant"}
                self.refreshed += 1
                return self._issue(login)
            grant = self.codes.pop(q.get("code", ""), None)  # a code works once
            if grant is None or grant.expires < time.time() or grant.client != q.get(
                    "client_id") or grant.redirect_uri != q.get("redirect_uri"):
                return {"error": "bad_verification_code"}
            if grant.challenge:
                digest = hashlib.sha256(q.get("code_verifier", "").encode()).digest()
                if grant.method != "S256" or base64.urlsafe_b64encode(digest).rstrip(
                        b"=").decode() != grant.challenge:
                    return {"error": "invalid_grant",
                            "error_description": "code_verifier does not match"}
            return self._issue(grant.login) | {"scope": grant.scope}

    def bearer(self, authorization: str) -> User | None:
        scheme, _, token = authorization.partition(" ")
        found = self.tokens.get(token) if scheme.lower() in ("bearer", "token") else None
        if found is None or found[1] < time.time():
            return None
        return self.users.get(found[0])

    def api(self, path: str, user: User) -> Any:
        if self.style == "search_a":
            return {"sub": str(user.id), "email": user.email, "email_verified": user.verified,
                    "name": user.name}
        if path == "/user":
            return {"login": user.login, "id": user.id, "name": user.name, "email": None}
        if path == "/user/emails":
            return [{"email": user.email, "primary": True, "verified": user.verified},
                    {"email": f"{user.login}@users.noreply.example", "primary": False,
                     "verified": True}]
        if path == "/user/teams":
            return [{"id": i, "slug": slug, "organization": {"login": org}}
                    for org, slug, i in user.teams]
        return [{"login": org} for org in user.orgs]


class _Handler(StubHandler):
    provider: Provider  # (set by serving)

    def _json(self, value: Any, status: int = 200, extra: dict[str, str] | None = None
              ) -> None:
        self.send(status, {"Content-Type": "application/json", **(extra or {})},
                  json.dumps(value).encode())

    def do_GET(self) -> None:
        p = self.provider
        path, q = self.query()
        if path == PATHS[p.style]["authorize"]:
            self.send(*p.authorize_form(q))
            return
        user = p.bearer(self.headers.get("Authorization", ""))
        if user is None or path not in PATHS[p.style].values():
            self._json({"message": "Bad credentials"}, 401)
            return
        items = p.api(path, user)
        if isinstance(items, list):  # paged as GitHub pages
            size = min(int(q.get("per_page", "30")), p.page_size)
            page = int(q.get("page", "1"))
            chunk = items[(page - 1) * size:page * size]
            extra = {"Link": f'<{p.url}{path}?per_page={size}&page={page + 1}>; '
                             'rel="next"'} if page * size < len(items) else {}
            self._json(chunk, extra=extra)
            return
        self._json(items)

    def do_POST(self) -> None:
        p = self.provider
        q = self.form()
        path, _ = self.query()
        if path == PATHS[p.style]["authorize"]:
            self.send(*p.authorize(q))
        elif path == PATHS[p.style]["token"]:
            auth = self.headers.get("Authorization", "")
            answer = p.token(q, auth[6:] if auth.startswith("Basic ") else "")
            status = 400 if "error" in answer and p.style == "search_a" else 200
            if "json" in self.headers.get("Accept", ""):
                self._json(answer, status)
            else:
                self.send(status, {"Content-Type": "application/x-www-form-urlencoded"},
                          urlencode(answer).encode())
        else:
            self.send(404, {}, b"")


@contextmanager
def running(style: str) -> Iterator[Provider]:
    provider = Provider(style)
    with serving(_Handler, provider.port, provider=provider):
        yield provider
