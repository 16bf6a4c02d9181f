"""The oauth module through a real tunnel (an SDK agent's labeled tunnel behind the route),
against local providers speaking code_host_a's and search_a's protocols, with a
cookie-keeping client: the login (state, PKCE, scopes), the original URL restored, identity
headers, the e-mail, team and organization rules, re-checks after auth_check_interval (a
refreshed token, a revoked user, a user who left the team), the managed application behind
the login host, and the official SDK's oauth(...) bind."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from edgeway.edge.login import base as login
from tests.edge.agents import agent
from tests.edge.identity.browser import Browser, form
from tests.edge.identity.conftest import MANAGED, Identity
from tests.edge.identity.providers import User
from tests.edge.test_edges import made, route


def oauth_site(ids: Identity, host: str, provider: str, **app: Any) -> str:
    """An HTTPS edge for ``host`` whose one route logs in with ``provider`` (its own
    application registered at the local provider unless ``client_id`` is None)."""
    module = {k: app.pop(k) for k in ("auth_check_interval", "inactivity_timeout")
              if k in app}
    own = app.pop("client_id", f"{host}-client")
    if own is not None:
        app |= {"client_id": own, "client_secret": f"{host}-secret"}
        local = ids.code_host if provider == "code_host_a" else ids.search
        local.client(own, f"{host}-secret", f"{ids.site(host)}/.edgeway/oauth/callback")
    with ids.srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
        route(api, edge["id"], "path_prefix", "/", ids.backend,
              oauth={"provider": {provider: app}, **module})
    return ids.site(host)


def log_in(web: Browser, url: str, user: str) -> httpx.Response:
    page = web.go(url)
    assert page.status_code == 200 and "Sign in" in page.text, page.text
    return web.submit(page, login=user)


def identity(r: httpx.Response) -> dict[str, str]:
    assert r.status_code == 200, r.text
    return {k: v for k, v in r.json()["headers"] if k.startswith("edgeway-auth-")}


def test_code_host_a_teams_organizations_and_the_original_url(ids: Identity) -> None:
    site = oauth_site(ids, "gh.example.com", "code_host_a", teams=["acme/ops"],
                      organizations=["acme"], scopes=["repo"])
    with Browser(ids.srv) as web:
        r = log_in(web, f"{site}/headers?x=1", "alice")
        assert (r.url.path, r.url.query) == ("/headers", b"x=1")  # where the login started
        assert identity(r) == {"edgeway-auth-user-id": "1", "edgeway-auth-user-name": "Alice",
                               "edgeway-auth-user-email": "alice@acme.example"}
        asked = ids.code_host.asked[-1]
        assert asked["scope"].split() == ["repo", "read:user", "user:email", "read:org"]
        assert asked["code_challenge_method"] == "S256" and len(asked["code_challenge"]) == 43
        assert asked["redirect_uri"] == f"{site}/.edgeway/oauth/callback"
        forged = web.go(f"{site}/headers", headers={"Edgeway-Auth-User-Email": "x@evil"})
        assert identity(forged)["edgeway-auth-user-email"] == "alice@acme.example"
    with Browser(ids.srv) as web:  # a member of the organization, in no team
        assert identity(log_in(web, f"{site}/headers", "bob"))["edgeway-auth-user-id"] == "2"
    with Browser(ids.srv) as web:
        r = log_in(web, f"{site}/headers", "carol")
        assert r.status_code == 403 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4015"
        assert "not allowed by teams or organizations" in r.text
        assert web.cookie("gh.example.com", "__Host-edgeway.session") is None


def test_email_rules(ids: Identity) -> None:
    site = oauth_site(ids, "mail.example.com", "code_host_a", email_domains=["acme.example"],
                      email_addresses=["carol@elsewhere.example"])
    outcomes = {}
    for user in ("alice", "carol", "dave"):
        with Browser(ids.srv) as web:
            r = log_in(web, f"{site}/headers", user)
            outcomes[user] = r.status_code
            if r.status_code == 403:
                assert "by email_addresses or email_domains" in r.text
    # dave's only acme address is not verified at the provider
    assert outcomes == {"alice": 200, "carol": 200, "dave": 403}


def test_a_callback_from_another_browser_or_a_used_code_is_refused(ids: Identity) -> None:
    site = oauth_site(ids, "state.example.com", "code_host_a")
    with Browser(ids.srv) as web, Browser(ids.srv) as other:
        page = web.go(f"{site}/headers")
        action, _, fields = form(page)
        callback = web.direct.post(action, data=fields | {"login": "alice"}).headers["location"]
        r = other.go(callback)  # not the browser that started it: no state cookie
        assert r.status_code == 400 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4015"
        state = web.cookie("state.example.com", "__Host-edgeway.oauth_state")
        assert web.go(callback).status_code == 200  # the right browser
        assert web.cookie("state.example.com", "__Host-edgeway.oauth_state") is None  # (spent)
        with Browser(ids.srv) as replay:  # the same answer again, with the state cookie
            replay.jar["state.example.com"] = {"__Host-edgeway.oauth_state": (str(state), "lax")}
            r = replay.go(callback)
            assert r.status_code == 403 and "did not exchange the code" in r.text


def test_search_a_refreshes_then_a_revoked_user_loses_access(ids: Identity) -> None:
    site = oauth_site(ids, "g.example.com", "search_a", email_domains=["search.example"],
                      auth_check_interval=1)
    with Browser(ids.srv) as web:  # the provider has not verified hank's address
        r = log_in(web, f"{site}/headers", "hank")
        assert r.status_code == 403 and "email_domains" in r.text
    ids.search.token_ttl = 1.0  # access tokens expire: re-checks refresh them
    try:
        with Browser(ids.srv) as web:
            assert identity(log_in(web, f"{site}/headers", "gina"))[
                "edgeway-auth-user-email"] == "gina@search.example"
            refreshed = ids.search.refreshed
            deadline = time.monotonic() + 20
            while ids.search.refreshed < refreshed + 2:  # two refreshes, each token used once
                assert identity(web.go(f"{site}/headers"))[  # (checked with new tokens)
                    "edgeway-auth-user-email"] == "gina@search.example"
                assert time.monotonic() < deadline, "the tokens were not refreshed twice"
                time.sleep(0.2)
            ids.search.revoke("gina")
            revoked = time.monotonic()
            deadline = revoked + 10
            while (r := web.request("GET", f"{site}/headers")).status_code == 200:
                assert time.monotonic() < deadline, "a revoked user kept access"
                time.sleep(0.2)
            assert time.monotonic() - revoked < 1 + 2.0  # auth_check_interval, and a request
            assert r.status_code == 302 and r.headers["location"].startswith(ids.search.url)
    finally:
        ids.search.token_ttl = 3600.0
        ids.search.add(User("gina", 101, "Gina", "gina@search.example"))


def test_a_user_who_left_the_team_is_refused_at_the_next_check(ids: Identity) -> None:
    site = oauth_site(ids, "team.example.com", "code_host_a", teams=["acme/ops"],
                      auth_check_interval=1)
    erin = ids.code_host.users["erin"]
    with Browser(ids.srv) as web:
        assert identity(log_in(web, f"{site}/headers", "erin"))["edgeway-auth-user-id"] == "5"
        erin.teams = []
        deadline = time.monotonic() + 10
        while (r := web.request("GET", f"{site}/headers")).status_code == 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert r.status_code == 403 and "not allowed by teams" in r.text
        assert web.request("GET", f"{site}/headers").status_code == 302  # the session ended
    erin.teams = [("acme", "ops", 11)]


def test_logout_ends_the_session(ids: Identity) -> None:
    site = oauth_site(ids, "out.example.com", "code_host_a")
    with Browser(ids.srv) as web:
        assert log_in(web, f"{site}/headers", "alice").status_code == 200
        r = web.go(f"{site}/.edgeway/oauth/logout")
        assert r.status_code == 200
        assert web.cookie("out.example.com", "__Host-edgeway.session") is None
        assert web.request("GET", f"{site}/headers").status_code == 302


def test_managed_application_needed_and_configured(ids: Identity) -> None:
    with ids.srv.client() as api:
        made(api, "/reserved_domains", {"domain": "managed.example.com"})
        edge = made(api, "/edges/https", {"hostports": ["managed.example.com:443"]})
        rt = route(api, edge["id"], "path_prefix", "/", ids.backend)
        url = f"/edges/https/{edge['id']}/routes/{rt['id']}/oauth"
        r = api.put(url, json={"provider": {"search_a": {}}})
        assert r.status_code == 400 and r.json()["error_code"] == "ERR_EDGEWAY_7035"
        assert "search_a.client_id" in r.json()["msg"] and "--oauth-apps" in r.json()["msg"]
        assert api.put(url, json={"provider": {"code_host_a": {}}}).status_code == 200
    with Browser(ids.srv) as web:
        page = web.go(f"{ids.site('managed.example.com')}/headers")
        query = parse_qs(urlsplit(str(page.url)).query)
        assert query["client_id"] == [MANAGED[0]]
        assert query["redirect_uri"] == [f"{ids.login_site}/.edgeway/oauth/callback"]
        r = web.submit(page, login="bob")  # via the login host, back to this host
        assert identity(r)["edgeway-auth-user-id"] == "2"
        # the login host sends browsers on to the host a (signed) state names: never one a
        # Host header smuggled in
        sneaky = web.edge.request("GET", f"{ids.site('managed.example.com')}/private", headers={
            "Host": "managed.example.com:443@evil.example"})
        state = login.peek(parse_qs(urlsplit(sneaky.headers["location"]).query)["state"][0])
        assert state is not None and state["h"] == "managed.example.com"
        hosts = [h.url.host for h in web.history]
        assert "127.0.0.1" in hosts
        assert any(str(h.request.headers.get("host", "")).startswith("login.edgeway.localhost")
                   for h in web.history)


@pytest.mark.usefixtures("ids")
def test_the_sdk_oauth_bind(ids: Identity, service: int) -> None:
    with ids.srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    forward = f"http://127.0.0.1:{service}"
    a = agent(ids.srv, token,
              {"kind": "https", "forward": forward, "oauth": ["github", ["alice@acme.example"]]},
              {"kind": "https", "forward": forward, "oauth": ["google"]},
              {"kind": "http", "forward": forward, "oauth": ["github"]},
              {"kind": "https", "forward": forward, "oauth": ["myspace"]},
              {"kind": "https", "forward": forward, "oauth": [  # its own application
                  "google", None, ["search.example"], None, "sdk-client", "sdk-secret"]})
    try:
        errors = [ln.get("error", "") for ln in a.listeners]
        assert "no managed OAuth application for google" in errors[1]
        assert "need an https tunnel" in errors[2]
        assert "'myspace' is not one of" in errors[3]
        assert all("ERR_NGROK_8000" in e for e in errors[1:4]) and not errors[4]
        url = a.urls[0]
        with Browser(ids.srv) as web:
            r = log_in(web, f"{url}/headers", "alice")
            assert identity(r)["edgeway-auth-user-email"] == "alice@acme.example"
        with ids.srv.client() as api:  # the session names the agent's endpoint
            (session,) = api.get("/app/sessions", params={
                "filter": f'obj.public_url == "{url}"'}).json()["application_sessions"]
            assert session["endpoint"]["id"].startswith("ep_") and session["route"] is None
        with Browser(ids.srv) as web:
            r = log_in(web, f"{url}/headers", "bob")
            assert r.status_code == 403 and "email_addresses" in r.text
        own = a.urls[4]
        ids.search.client("sdk-client", "sdk-secret", f"{own}/.edgeway/oauth/callback")
        with Browser(ids.srv) as web:
            r = log_in(web, f"{own}/headers", "gina")
            assert identity(r)["edgeway-auth-user-email"] == "gina@search.example"
            assert ids.search.asked[-1]["redirect_uri"] == f"{own}/.edgeway/oauth/callback"
    finally:
        a.stop()


def test_tokens_that_are_not_ascii_get_a_login_not_a_dropped_connection(ids: Identity) -> None:
    """A signed state or session cookie with characters outside ASCII (anyone can send one)
    is refused like any forged token (it dropped the connection with a TypeError)."""
    site = oauth_site(ids, "ascii.example.com", "code_host_a")
    with Browser(ids.srv) as web:
        r = web.request("GET", f"{ids.login_site}/.edgeway/oauth/callback?state=x.%C3%A9")
        assert r.status_code in (400, 403), r.text
        r = web.request("GET", f"{site}/.edgeway/oauth/callback?state=a.b%E2%82%AC&code=c")
        assert r.status_code in (400, 403), r.text
        r = web.request("GET", f"{site}/headers",
                        headers={"Cookie": b"__Host-edgeway.session=e30.\xe9\xe9"})
        assert r.status_code == 302 and "/login/oauth/authorize" in r.headers["location"]
