"""Dashboard sign-in and its sessions over real HTTP, on both backends: the cookie's flags,
CSRF, cross-site posts, a stolen cookie after sign-out, a stored session id presented as a
cookie, another database's session, revoked keys and sessions, and the sign-in limit."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from http.cookies import SimpleCookie
from pathlib import Path

import asyncpg
import httpx
import pytest

from tests.conftest import BACKENDS
from tests.dashboard.visitor import csrf_of, post, sign_in, signed_in, visitor
from tests.server import Server, fresh_pg_database, start


def cookie_of(r: httpx.Response, name: str) -> dict[str, str]:
    """The attributes of the Set-Cookie for ``name`` (lower-cased names), and its value."""
    for header in r.headers.get_list("set-cookie"):
        jar: SimpleCookie = SimpleCookie()
        jar.load(header)
        if name in jar:
            morsel = jar[name]
            flags = {k: str(v) for k, v in morsel.items() if v}
            return {"value": morsel.value, **flags}
    raise AssertionError(f"no Set-Cookie {name}: {r.headers.get_list('set-cookie')}")


def keys(srv: Server) -> set[str]:
    with srv.client() as api:
        return {k["id"] for k in api.get("/api_keys").json()["keys"]}


def test_sign_in_sets_a_strict_http_only_session_cookie(server: Server) -> None:
    with visitor(server) as browser:
        form = browser.get("/dashboard/signin")
        pre = cookie_of(form, "edgeway_signin")
        assert pre["httponly"] and pre["samesite"].lower() == "strict", pre
        r = sign_in(browser, server.token)
        assert r.status_code == 303, r.text
        c = cookie_of(r, "edgeway_session")
        assert c["httponly"] is not None and c["httponly"], c
        assert c["samesite"].lower() == "strict" and c["path"] == "/dashboard", c
        assert "secure" not in c and "expires" not in c and "max-age" not in c, c
        assert server.token not in r.headers.get("set-cookie", "")
        page = browser.get("/dashboard/")
        assert page.status_code == 200 and "Overview" in page.text
        assert page.headers["cache-control"] == "no-store"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert server.token not in page.text


def test_the_cookie_is_secure_behind_an_https_public_url(tmp_path: Path
                                                          ) -> None:
    srv = start(tmp_path / "srv", None, "--public-url", "https://edge.example.com")
    try:
        with visitor(srv) as browser:  # (httpx keeps a Secure cookie from http: sent here)
            form = browser.get("/dashboard/signin")
            pre = cookie_of(form, "edgeway_signin")
            assert pre["secure"]
            r = browser.post("/dashboard/signin", data={"csrf": csrf_of(form),
                                                        "key": srv.token},
                             headers={"Cookie": f"edgeway_signin={pre['value']}"})
            assert cookie_of(r, "edgeway_session")["secure"]
    finally:
        assert srv.stop() == 0


def test_a_form_without_its_csrf_token_is_refused(server: Server) -> None:
    before = keys(server)
    with signed_in(server) as browser:
        for data in ({}, {"csrf": ""}, {"csrf": "0" * 64}):
            r = browser.post("/dashboard/api_keys", data={**data, "role": "admin"})
            assert r.status_code == 403 and "CSRF token" in r.text, r.text
        token = csrf_of(browser.get("/dashboard/api_keys"))
        r = browser.post("/dashboard/signout", data={"csrf": token[:-1]})
        assert r.status_code == 403
        assert browser.get("/dashboard/").status_code == 200  # (still signed in)
    with visitor(server) as stranger:
        stranger.get("/dashboard/signin")
        r = stranger.post("/dashboard/signin", data={"key": server.token})
        assert r.status_code == 403 and "CSRF token" in r.text
        assert "edgeway_session" not in r.headers.get("set-cookie", "")
    assert keys(server) == before


def test_a_cross_site_post_is_refused(server: Server) -> None:
    before = keys(server)
    with signed_in(server) as browser:
        token = csrf_of(browser.get("/dashboard/api_keys"))
        for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                        {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
            r = browser.post("/dashboard/api_keys", data={"csrf": token}, headers=headers)
            assert r.status_code == 403 and "another site" in r.text, (headers, r.text)
        same = browser.post("/dashboard/api_keys", data={"csrf": token, "role": "read_only"},
                            headers={"Origin": server.base_url,
                                     "Sec-Fetch-Site": "same-origin"})
        assert same.status_code == 201 and 'id="token"' in same.text, same.text
    made = keys(server) - before
    assert len(made) == 1
    with server.client() as api:
        assert api.delete(f"/api_keys/{made.pop()}").status_code == 204


def test_a_stolen_cookie_is_useless_after_sign_out(server: Server) -> None:
    with signed_in(server) as browser:
        stolen = browser.cookies["edgeway_session"]
        token = csrf_of(browser.get("/dashboard/"))
        with visitor(server) as thief:
            thief.cookies.set("edgeway_session", stolen, path="/dashboard")
            assert thief.get("/dashboard/").status_code == 200  # (before: it works)
            r = browser.post("/dashboard/signout", data={"csrf": token})
            assert r.status_code == 303 and r.headers["location"].startswith(
                "/dashboard/signin")
            assert cookie_of(r, "edgeway_session")["value"] == ""
            r = thief.get("/dashboard/")
            assert r.status_code == 303 and "/dashboard/signin" in r.headers["location"]
            r = thief.post("/dashboard/api_keys", data={"csrf": token})
            assert r.status_code == 403 and "session has ended" in r.text


def session_ids(srv: Server) -> list[str]:
    """The ids of the dashboard's session rows, read from the database itself."""
    sql = "SELECT id FROM dashboard_sessions"
    if srv.database_url is None:
        with sqlite3.connect(srv.data_dir / "edgeway.db") as db:
            return [row[0] for row in db.execute(sql)]

    async def read() -> list[str]:
        conn = await asyncpg.connect(srv.database_url)
        try:
            return [row[0] for row in await conn.fetch(sql)]
        finally:
            await conn.close()
    return asyncio.run(read())


def test_a_stored_session_id_is_no_cookie(server: Server) -> None:
    """A copy of the database gives nothing to present: the row holds the secret's digest."""
    with signed_in(server) as browser:
        secret = browser.cookies["edgeway_session"]
        stored = session_ids(server)
        assert stored and secret not in stored
        with visitor(server) as thief:
            for sid in stored:
                thief.cookies.set("edgeway_session", sid, path="/dashboard")
                r = thief.get("/dashboard/api_keys")
                assert r.status_code == 303 and "/dashboard/signin" in r.headers["location"]


def test_another_servers_session_is_refused(server: Server, own_server: Server) -> None:
    with signed_in(own_server) as theirs, visitor(server) as browser:
        browser.cookies.set("edgeway_session", theirs.cookies["edgeway_session"],
                            path="/dashboard")
        r = browser.get("/dashboard/")
        assert r.status_code == 303 and "/dashboard/signin" in r.headers["location"]


@pytest.mark.skipif("postgres" not in BACKENDS, reason="two nodes share a PostgreSQL database")
def test_nodes_sharing_a_database_share_sessions(tmp_path: Path) -> None:
    env = {"EDGEWAY_SECRET_KEY": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}
    with fresh_pg_database() as url:
        a = start(tmp_path / "a", url, env=env)
        b = start(tmp_path / "b", url, token=a.token, env=env)
        try:
            with signed_in(a) as on_a, visitor(b) as on_b:
                on_b.cookies.set("edgeway_session", on_a.cookies["edgeway_session"],
                                 path="/dashboard")
                assert on_b.get("/dashboard/").status_code == 200
                r = post(on_b, "/dashboard/ip_policies", "/dashboard/ip_policies",
                         {"description": "made on b"})
                assert r.status_code == 303, r.text
                assert "made on b" in on_a.get("/dashboard/ip_policies").text
                assert post(on_b, "/dashboard/", "/dashboard/signout", {}).status_code == 303
                r = on_a.get("/dashboard/")
                assert r.status_code == 303 and "/dashboard/signin" in r.headers["location"]
        finally:
            assert b.stop() == 0 and a.stop() == 0


def test_a_deleted_api_key_ends_its_sessions(server: Server) -> None:
    with server.client() as api:
        made = api.post("/api_keys", json={"role": "operator"}).json()
    with signed_in(server, made["token"]) as browser:
        assert browser.get("/dashboard/ip_policies").status_code == 200
        with server.client() as api:
            assert api.delete(f"/api_keys/{made['id']}").status_code == 204
        r = browser.get("/dashboard/ip_policies")
        assert r.status_code == 303 and "/dashboard/signin" in r.headers["location"]


def current_ref(browser: httpx.Client) -> str:
    """The id the sessions page shows for this browser's own session."""
    found = re.search(r'<tr id="session-([^"]+)" class="current">',
                      browser.get("/dashboard/sessions").text)
    assert found
    return found.group(1)


def test_sessions_are_listed_and_revocable(server: Server) -> None:
    with server.client() as api:
        mine = api.post("/api_keys", json={"role": "read_only"}).json()
    with signed_in(server) as admin, signed_in(server, mine["token"]) as other, \
            signed_in(server, mine["token"]) as third:
        own = other.get("/dashboard/sessions").text
        assert own.count('<tr id="session-') == 2, own  # (its key's, not the admin's)
        refs = {current_ref(b) for b in (admin, other, third)}
        everyone = admin.get("/dashboard/sessions").text
        assert len(refs) == 3 and all(f'id="session-{ref}"' in everyone for ref in refs)
        r = post(other, "/dashboard/sessions", "/dashboard/sessions/revoke",
                 {"ref": current_ref(admin)})
        assert r.status_code == 404  # (not its key's session)
        r = post(admin, "/dashboard/sessions", "/dashboard/sessions/revoke",
                 {"ref": current_ref(third)})
        assert r.status_code == 303
        r = third.get("/dashboard/")
        assert r.status_code == 303 and "/dashboard/signin" in r.headers["location"]
        assert other.get("/dashboard/").status_code == 200
        assert admin.get("/dashboard/").status_code == 200
    with server.client() as api:
        assert api.delete(f"/api_keys/{mine['id']}").status_code == 204


def test_wrong_keys_are_refused_in_the_apis_words(server: Server) -> None:
    with server.client() as api:
        authtoken = api.post("/credentials", json={}).json()
        key_id = next(iter(keys(server)))
    with visitor(server) as browser:
        for given, code in (("not a key", "202"), (key_id, "208"),
                            (authtoken["token"], "206"), (server.token[:-2] + "xx", "203")):
            r = sign_in(browser, given)
            assert r.status_code == 403 and f"ERR_EDGEWAY_{code}" in r.text, (given, r.text)
            assert 'id="key-error"' in r.text
    with server.client() as api:
        assert api.delete(f"/credentials/{authtoken['id']}").status_code == 204


def test_sign_in_attempts_are_limited_per_address(tmp_path: Path) -> None:
    srv = start(tmp_path / "srv", None, "--dashboard-signin-rate", "3")
    try:
        with visitor(srv) as browser, visitor(srv, "127.0.0.2") as elsewhere:
            for _ in range(3):
                assert sign_in(browser, "wrong").status_code == 403
            r = sign_in(browser, srv.token)  # (even the right key, now)
            assert r.status_code == 429 and int(r.headers["retry-after"]) > 0, r.text
            assert "Too many sign-in attempts" in r.text
            assert sign_in(elsewhere, srv.token).status_code == 303
        assert "dashboard_signin_limited" in srv.log()
    finally:
        assert srv.stop() == 0
