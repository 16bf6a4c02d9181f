"""The oidc module against a real OpenID provider (oidc-provider-mock, Flask + authlib, on
loopback): redirect to log in, the provider's consent form, the callback's code exchange and ID
token check, the session cookie, identity headers upstream (never the client's own), a
tampered cookie, a callback from another browser, logout, and a session's maximum duration."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.edge.agents import EdgeClient
from tests.edge.test_edges import made, route
from tests.server import Server, free_port, trust

HOST = "login.example.com"


@pytest.fixture(scope="module")
def login_edge(srv: Server, service: int, issuer: str) -> dict[str, str]:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": HOST})
        edge = made(api, "/edges/https", {"hostports": [f"{HOST}:443"]})
        svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
        r = route(api, edge["id"], "path_prefix", "/", svc["id"], oidc={
            "issuer": issuer, "client_id": "edge-client", "client_secret": "edge-secret",
            "maximum_duration": 4})
    return {"edge": edge["id"], "route": r["id"]}


def cookies(r: httpx.Response) -> dict[str, str]:
    out = {}
    for line in r.headers.get_list("set-cookie"):
        name, _, rest = line.partition("=")
        out[name] = rest.split(";", 1)[0]
    return out


def log_in(web: EdgeClient, user: str, target: str = "/headers?x=1"
           ) -> tuple[httpx.Response, dict[str, str]]:
    """Through the whole flow as a browser would: the answer to the callback and the
    cookies it set."""
    web.http.cookies.clear()
    r = web.get(f"https://{HOST}{target}")
    assert r.status_code == 302, r.text
    state_cookie = cookies(r)["__Host-edgeway.oidc_state"]
    authorize = r.headers["location"]
    query = parse_qs(urlsplit(authorize).query)
    assert query["redirect_uri"] == [f"https://{HOST}/.edgeway/oidc/callback"]
    assert query["client_id"] == ["edge-client"] and "openid" in query["scope"][0].split()
    consent = httpx.post(authorize, data={"sub": user}, follow_redirects=False, verify=trust())
    assert consent.status_code == 302, consent.text
    callback = urlsplit(consent.headers["location"])
    assert callback.hostname == HOST
    web.http.cookies.clear()
    r = web.get(f"https://{HOST}{callback.path}?{callback.query}",
                headers={"Cookie": f"__Host-edgeway.oidc_state={state_cookie}"})
    return r, {**cookies(r), "_callback": f"{callback.path}?{callback.query}"}


@pytest.mark.usefixtures("login_edge")
def test_log_in_then_requests_carry_the_identity(srv: Server) -> None:
    with EdgeClient(srv) as web:
        done, set_ = log_in(web, "alice@example.com")
        assert done.status_code == 302 and done.headers["location"] == "/headers?x=1"
        session = set_["__Host-edgeway.session"]
        web.http.cookies.clear()
        r = web.get(f"https://{HOST}/headers?x=1", headers={
            "Cookie": f"__Host-edgeway.session={session}", "Edgeway-Auth-User-Id": "mallory"})
        assert r.status_code == 200, r.text
        seen = r.json()["headers"]
        ids = [v for k, v in seen if k == "edgeway-auth-user-id"]
        assert ids == ["alice@example.com"]  # the client's own header was dropped
        assert ["edgeway-auth-user-email", "alice@example.com"] in seen
        web.http.cookies.clear()
        tampered = session[:-2] + ("AA" if not session.endswith("AA") else "BB")
        r = web.get(f"https://{HOST}/headers",
                    headers={"Cookie": f"__Host-edgeway.session={tampered}"})
        assert r.status_code == 302  # back to the provider
        web.http.cookies.clear()
        r = web.get(f"https://{HOST}/.edgeway/oidc/logout",
                    headers={"Cookie": f"__Host-edgeway.session={session}"})
        assert r.status_code == 200 and "__Host-edgeway.session=;" in r.headers["set-cookie"]
        assert "Max-Age=0" in r.headers["set-cookie"]


@pytest.mark.usefixtures("login_edge")
def test_a_callback_from_another_browser_or_replayed_is_refused(srv: Server) -> None:
    with EdgeClient(srv) as web:
        done, set_ = log_in(web, "bob@example.com")
        assert done.status_code == 302
        web.http.cookies.clear()
        r = web.get(f"https://{HOST}{set_['_callback']}")  # no state cookie: not this browser
        assert r.status_code == 400 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4015"


@pytest.mark.usefixtures("login_edge")
def test_sessions_end_after_the_maximum_duration(srv: Server) -> None:
    with EdgeClient(srv) as web:
        _, set_ = log_in(web, "carol@example.com")
        session = {"Cookie": f"__Host-edgeway.session={set_['__Host-edgeway.session']}"}
        web.http.cookies.clear()
        assert web.get(f"https://{HOST}/headers", headers=session).status_code == 200
        time.sleep(5)  # maximum_duration is 4 s
        web.http.cookies.clear()
        assert web.get(f"https://{HOST}/headers", headers=session).status_code == 302


def test_an_unreachable_provider_is_a_502_not_a_pass(srv: Server, service: int) -> None:
    host, dead = "nologin.example.com", free_port()  # nothing listens there
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
        svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
        route(api, edge["id"], "path_prefix", "/", svc["id"], oidc={
            "issuer": f"http://127.0.0.1:{dead}", "client_id": "c", "client_secret": "s"})
    with EdgeClient(srv) as web:
        for _ in range(2):  # the second answer comes from the remembered failure
            r = web.get(f"https://{host}/headers")
            assert r.status_code == 502 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4014"
