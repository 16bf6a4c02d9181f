"""Who is logged in: /app/users and /app/sessions list the end users who logged in through
the edge and their browsers' sessions; deleting a session logs that browser out on its next
request, deleting a user ends all their sessions; an idle session ends after
inactivity_timeout."""

from __future__ import annotations

import time
from typing import Any

from edgeway.edge.login import base as login
from tests.edge.identity.browser import CHROME, Browser
from tests.edge.identity.conftest import Identity
from tests.edge.identity.test_oauth import identity, log_in, oauth_site


def sid(web: Browser, host: str) -> str:
    cookie = web.cookie(host, "__Host-edgeway.session")
    assert cookie is not None
    payload = login.peek(cookie)
    assert payload is not None
    return str(payload["s"])


def listed(ids: Identity, path: str, cel: str) -> list[dict[str, Any]]:
    with ids.srv.client() as api:
        r = api.get(path, params={"filter": cel})
        assert r.status_code == 200, r.text
        key = "application_users" if path == "/app/users" else "application_sessions"
        out: list[dict[str, Any]] = r.json()[key]
    return out


def test_users_and_sessions_are_listed_and_deleting_them_logs_out(ids: Identity) -> None:
    host = "who.example.com"
    site = oauth_site(ids, host, "code_host_a")
    with Browser(ids.srv) as one, Browser(ids.srv) as two, Browser(ids.srv) as three:
        for web, user in ((one, "alice"), (two, "alice"), (three, "bob")):
            assert log_in(web, f"{site}/headers", user).status_code == 200
        (alice,) = listed(ids, "/app/users", 'obj.provider_user_id == "1" && '
                                             'obj.identity_provider.name == "code_host_a"')
        assert alice["identity_provider"] == {"name": "code_host_a", "url": ids.code_host.url}
        assert (alice["username"], alice["email"], alice["name"]) == \
            ("alice", "alice@acme.example", "Alice")
        assert alice["last_login"] and alice["uri"].endswith(f"/app/users/{alice['id']}")
        sessions = listed(ids, "/app/sessions", f'obj.public_url == "{site}"')
        assert len(sessions) == 3
        mine = next(s for s in sessions if s["id"] == sid(one, host))
        assert mine["application_user"]["id"] == alice["id"]
        assert mine["route"]["uri"].endswith(f"/routes/{mine['route']['id']}")
        assert mine["edge"]["id"].startswith("edghts_") and mine["endpoint"] is None
        browser = mine["browser_session"]
        assert browser["user_agent"]["raw"] == CHROME and browser["ip_address"] == "127.0.0.1"
        assert (browser["user_agent"]["browser_name"], browser["user_agent"]["os_name"],
                browser["user_agent"]["device_type"]) == ("Chrome", "Linux", "desktop")
        assert mine["expires_at"] > mine["created_at"]

        with ids.srv.client() as api:
            assert api.delete(f"/app/sessions/{sid(one, host)}").status_code == 204
        assert one.request("GET", f"{site}/headers").status_code == 302  # logged out
        assert identity(two.request("GET", f"{site}/headers"))  # the other browser is not

        with ids.srv.client() as api:
            assert api.delete(f"/app/users/{alice['id']}").status_code == 204
            assert api.get(f"/app/users/{alice['id']}").status_code == 404
            assert api.get(f"/app/sessions/{sid(two, host)}").status_code == 404
        assert two.request("GET", f"{site}/headers").status_code == 302
        assert identity(three.request("GET", f"{site}/headers"))["edgeway-auth-user-id"] == "2"
        left = listed(ids, "/app/sessions", f'obj.public_url == "{site}"')
        assert [s["id"] for s in left] == [sid(three, host)]


def test_an_idle_session_ends_after_the_inactivity_timeout(ids: Identity) -> None:
    idle = 2  # seconds; the server writes activity at most every idle/4 seconds
    site = oauth_site(ids, "idle.example.com", "code_host_a", inactivity_timeout=idle)
    deadline, kept = time.monotonic() + 60, 0.0
    while kept <= idle * 1.5:  # requests keep it alive past the timeout ...
        assert time.monotonic() < deadline, "never kept alive: the machine is too slow"
        web = Browser(ids.srv)  # (a browser of its own each round)
        # ``seen``: no later than the activity the server last wrote, by the client's clock
        # (a request's start, less idle/4, once it was answered as alive)
        seen = began = time.monotonic()
        assert log_in(web, f"{site}/headers", "bob").status_code == 200
        kept = ended = 0.0
        while kept <= idle * 1.5:
            time.sleep(idle / 8)  # (a user's pace)
            start = time.monotonic()
            status = web.request("GET", f"{site}/headers").status_code
            ended = time.monotonic()
            if ended - seen > idle - 0.1:
                web.__exit__()  # (too slow a round under load proves nothing: again)
                break
            assert status == 200
            seen, kept = start - idle / 4, ended - began
    with web:
        while time.monotonic() - ended <= idle + 0.1:  # ... idleness ends it
            time.sleep(0.05)
        assert web.request("GET", f"{site}/headers").status_code == 302
