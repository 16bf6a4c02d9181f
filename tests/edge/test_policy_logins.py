"""The traffic policy's ``openid-connect`` (and ``oauth``) actions: a login through a real
OpenID provider on loopback (oidc-provider-mock) on an edge route and on an SDK agent's
endpoint, the identity in the upstream's headers and in
``actions.ngrok.openid_connect.identity`` for a later rule that decides who gets in; options
the edge cannot honour are refused by name."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from edgeway.edge.hooks import Unenforced
from edgeway.edge.modules import traffic_policy as tp
from tests.edge.agents import EdgeClient, agent
from tests.edge.test_edges import made, route
from tests.server import Server, trust


def policy(issuer: str) -> str:
    return json.dumps({"on_http_request": [
        {"actions": [{"type": "openid-connect", "config": {
            "issuer_url": issuer, "client_id": "policy-client", "client_secret": "policy-secret",
            "scopes": ["openid", "email", "profile"], "max_session_duration": "1h"}}]},
        {"expressions": ["!actions.ngrok.openid_connect.identity.email.endsWith('@example.com')"],
         "actions": [{"type": "deny", "config": {"status_code": 403}}]},
        {"actions": [{"type": "add-headers", "config": {"headers": {
            "X-Who": "${actions.ngrok.openid_connect.identity.email}"}}}]}]})


def login(web: EdgeClient, url: str, user: str) -> httpx.Response:
    """Log ``user`` in through the provider; the answer to the first request after."""
    web.http.cookies.clear()
    r = web.get(f"{url}/headers")
    assert r.status_code == 302, r.text
    state = r.headers["set-cookie"].split(";", 1)[0]
    authorize = r.headers["location"]
    assert parse_qs(urlsplit(authorize).query)["client_id"] == ["policy-client"]
    back = httpx.post(authorize, data={"sub": user}, follow_redirects=False, verify=trust())
    callback = urlsplit(back.headers["location"])
    r = web.get(f"{url}{callback.path}?{callback.query}", headers={"Cookie": state})
    assert r.status_code == 302, r.text
    session = r.headers["set-cookie"].split(";", 1)[0]
    return web.get(f"{url}/headers", headers={"Cookie": session})


def test_openid_connect_on_a_route_and_an_sdk_endpoint(srv: Server, token: str, service: int,
                                                       issuer: str) -> None:
    host = "login-policy.example.com"
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
        svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
        route(api, edge["id"], "path_prefix", "/", svc["id"],
              traffic_policy={"value": policy(issuer)})
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                           "policy": policy(issuer)})
    try:
        with EdgeClient(srv) as web:
            for url in (f"https://{host}", a.urls[0]):
                r = login(web, url, "alice@example.com")
                assert r.status_code == 200, r.text
                seen = dict(r.json()["headers"])
                assert seen["edgeway-auth-user-email"] == "alice@example.com"
                assert seen["x-who"] == "alice@example.com"  # the action's result variable
                r = login(web, url, "mallory@example.net")
                assert (r.status_code, r.text) == (403, "Denied by the traffic policy (403).\n")
    finally:
        a.stop()


@pytest.mark.parametrize(("action", "said"), [
    ({"type": "openid-connect", "config": {"client_id": "c", "client_secret": "s"}},
     "issuer_url"),
    ({"type": "openid-connect", "config": {"issuer_url": "https://id.example.com"}},
     "client_id and client_secret are required"),
    ({"type": "openid-connect", "config": {"issuer_url": "https://id.example.com",
                                           "client_id": "c", "client_secret": "s",
                                           "max_session_duration": "a week"}},
     "max_session_duration"),
    ({"type": "openid-connect", "config": {"issuer_url": "https://id.example.com",
                                           "client_id": "c", "client_secret": "s",
                                           "pkce": True}}, "option 'pkce'"),
    ({"type": "oauth", "config": {"provider": "myspace"}}, "provider 'myspace'"),
    ({"type": "oauth", "config": {"provider": "google", "client_id": "c"}},
     "go together"),
])
def test_login_options_it_cannot_honour_are_refused(action: dict[str, Any], said: str) -> None:
    compiled = tp.compile({"value": json.dumps({"on_http_request": [{"actions": [action]}]})},
                          "r")
    assert isinstance(compiled, Unenforced) and said in compiled.what, compiled


def test_an_oauth_action_compiles_to_the_modules_gate() -> None:
    compiled = tp.compile({"value": json.dumps({"on_http_request": [{"actions": [
        {"type": "oauth", "config": {"provider": "github", "client_id": "c",
                                     "client_secret": "s", "auth_id": "team"}}]}]})}, "rt_1")
    assert isinstance(compiled, tp.Policy)
    (gate,) = compiled.within
    assert gate.name == "oauth" and gate.common.key == "rt_1"  # type: ignore[attr-defined]
    assert gate.common.cookie == "__Host-team.session"  # type: ignore[attr-defined]
