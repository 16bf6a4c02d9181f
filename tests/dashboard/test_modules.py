"""Edge and route modules as forms of their own, over real HTTP: every module of a route, an
HTTPS edge, a TCP edge and a TLS edge set through the API, then its form sent back as the
browser would send it untouched: the module the API shows is the same (ids for the Refs it
shows, a masked secret kept); a change saved; the API's message next to the input it names
(the traffic policy's under its editor); a line that is not ``name: value`` refused before
the API; Remove; a read-only key offered no module form and its forged one refused; and what
serves a route, through failover and weighted backends, down to its live tunnels."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from edgeway.catalog.modules import REGISTRY
from tests.api.samples import created, uniq
from tests.api.samples_edges import reserved, tcp_port, tunnel_group
from tests.api.test_modules import IDP_METADATA
from tests.certs import make_cert
from tests.dashboard.visitor import post, signed_in
from tests.edge.agents import agent
from tests.server import Server

POLICY = ("on_http_request:\n  - name: block curl\n    expressions:\n"
          "      - \"req.headers['user-agent'].exists(v, v.startsWith('curl'))\"\n"
          "    actions:\n      - type: custom-response\n        config:\n"
          "          status_code: 403\n")
TCP_POLICY = "on_tcp_connect:\n  - actions:\n      - type: deny\n"


class _Form(HTMLParser):
    """The values a browser would send for the form posting to ``action``, untouched."""

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action, self.inside = action, False
        self.values: dict[str, str] = {}
        self._select: str | None = None
        self._area: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self.inside = a.get("action") == self.action
        elif not self.inside:
            return
        elif tag == "input" and a.get("name"):
            self.values[str(a["name"])] = a.get("value") or ""
        elif tag == "select":
            self._select = a.get("name")
            self.values[str(self._select)] = ""
        elif tag == "option" and self._select and "selected" in a:
            self.values[self._select] = a.get("value") or ""
        elif tag == "textarea":
            self._area = a.get("name")
            self.values[str(self._area)] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            self._area = None

    def handle_data(self, data: str) -> None:
        if self._area is not None:
            text = data[1:] if data.startswith("\n") and not self.values[self._area] else data
            self.values[self._area] += text


def form_of(page: httpx.Response, action: str) -> dict[str, str]:
    parser = _Form(action)
    parser.feed(page.text)
    assert parser.values, f"no form to {action}"
    return dict(parser.values)


def _bodies(api: httpx.Client, where: str) -> dict[str, Any]:
    """A valid body of each module that attaches at ``where``."""
    policy = created(api, "/ip_policies", {"description": "modules"})["id"]
    ca = created(api, "/certificate_authorities", {"ca_pem": make_cert()})["id"]
    all_of = {
        "tls_termination": {"min_version": "1.3"} if where == "https_edge" else
        {"terminate_at": "edge", "min_version": "1.2"},  # (first: mutual TLS needs it)
        "backend": {"backend_id": tunnel_group(api)},
        "circuit_breaker": {"error_threshold_percentage": 0.25, "volume_threshold": 12},
        "compression": {"enabled": False},
        "ip_restriction": {"ip_policy_ids": [policy]},
        "mutual_tls": {"certificate_authority_ids": [ca]},
        "oauth": {"provider": {"code_host_a": {"client_id": "i", "client_secret": "s3cret",
                                               "scopes": ["read:org"], "teams": ["acme/ops"]}},
                  "cookie_prefix": "acme.", "auth_check_interval": 300},
        "oidc": {"issuer": "https://idp.example.com", "client_id": "c",
                 "client_secret": "oidc-s3cret", "scopes": ["openid", "email"]},
        "request_headers": {"add": {"X-A": "1", "X-B": "two: words"}, "remove": ["X-C"]},
        "response_headers": {"add": {"X-Served": "edge"}, "remove": ["Server"]},
        "saml": {"idp_metadata": IDP_METADATA, "authorized_groups": ["ops"]},
        "traffic_policy": {"value": TCP_POLICY if where in ("tcp_edge", "tls_edge")
                           else POLICY},
        "user_agent_filter": {"allow": ["curl/.*"], "deny": ["bot.*"]},
        "webhook_verification": {"provider": "github", "secret": "hook-s3cret"},
        "websocket_tcp_converter": {"enabled": True},
    }
    return {name: body for name, body in all_of.items() if where in REGISTRY[name].on}


def _made(api: httpx.Client, where: str) -> tuple[str, str]:
    """An edge or route of ``where``: its API URL and its dashboard page."""
    if where == "tcp_edge":
        edge = created(api, "/edges/tcp", {"hostports": [f"tcp.{uniq()}.example.com:"
                                                         f"{tcp_port()}"]})
        return f"/edges/tcp/{edge['id']}", f"/dashboard/edges_tcp/{edge['id']}"
    kind = "https" if where in ("https_edge", "route") else "tls"
    edge = created(api, f"/edges/{kind}", {"hostports": [f"{reserved(api)}:443"]})
    if where != "route":
        return f"/edges/{kind}/{edge['id']}", f"/dashboard/edges_{kind}/{edge['id']}"
    route = created(api, f"/edges/https/{edge['id']}/routes",
                    {"match_type": "path_prefix", "match": "/"})
    return (f"/edges/https/{edge['id']}/routes/{route['id']}",
            f"/dashboard/edges_https/{edge['id']}/routes/{route['id']}")


LOGINS = ("oauth", "oidc", "saml")  # (one of them per route)


def _rounds(bodies: dict[str, Any]) -> list[dict[str, Any]]:
    """The modules set together: every one but the logins, with one login each time."""
    rest = {n: b for n, b in bodies.items() if n not in LOGINS}
    logins = [n for n in LOGINS if n in bodies]
    return [{**rest, n: bodies[n]} for n in logins] or [rest]


@pytest.mark.parametrize("where", ["route", "https_edge", "tcp_edge", "tls_edge"])
def test_each_module_form_sent_back_untouched_keeps_the_module(server: Server,
                                                                where: str) -> None:
    with server.client() as api:
        url, page_path = _made(api, where)
        rounds = _rounds(_bodies(api, where))
    for bodies in rounds:
        with server.client() as api:
            for login in LOGINS:  # (the last round's)
                api.delete(f"{url}/{login}")
            before = {}
            for name, body in bodies.items():
                r = api.put(f"{url}/{name}", json=body)
                assert r.status_code == 200, (name, r.text)
                before[name] = r.json()
        with signed_in(server) as browser:
            page = browser.get(page_path)
            assert page.status_code == 200
            shown = re.findall(r'<details class="card" id="module-([a-z_]+)"', page.text)
            assert set(bodies) <= set(shown), shown  # (every module of the kind has a form)
            for name in bodies:
                action = f"{page_path}/modules/{name}"
                r = browser.post(action, data=form_of(page, action))
                assert r.status_code == 303, (name, r.text[-3000:])
                assert r.headers["location"] == f"{page_path}?module={name}&saved=1"
        with server.client() as api:
            for name in bodies:
                assert api.get(f"{url}/{name}").json() == before[name], name


def test_a_change_an_error_and_remove(server: Server) -> None:
    with server.client() as api:
        url, page_path = _made(api, "route")
    action = f"{page_path}/modules"
    with signed_in(server) as browser:
        r = post(browser, page_path, f"{action}/request_headers",
                 {"add": "X-Site: one\nX-Two: 2", "remove": "Cookie", "enabled": "true"})
        assert r.status_code == 303
        saved = browser.get(r.headers["location"])
        assert "Saved the request_headers module." in saved.text
        with server.client() as api:
            assert api.get(f"{url}/request_headers").json() == {
                "enabled": True, "add": {"X-Site": "one", "X-Two": "2"}, "remove": ["Cookie"]}
        # the API's rule, next to its input
        r = post(browser, page_path, f"{action}/circuit_breaker",
                 {"error_threshold_percentage": "2"})
        assert r.status_code == 400
        err = re.search(r'id="m-circuit_breaker-err-error_threshold_percentage">([^<]*)',
                        r.text)
        assert err and "ERR_EDGEWAY_" in err.group(1), r.text[-3000:]
        assert 'id="module-circuit_breaker" open' in r.text
        # the traffic policy's message under its editor
        r = post(browser, page_path, f"{action}/traffic_policy",
                 {"value": "on_http_request:\n  - actions:\n      - type: nope\n"})
        err = re.search(r'id="m-traffic_policy-err-value">([^<]*)', r.text)
        assert r.status_code == 400 and err and "nope" in err.group(1), r.text[-3000:]
        assert 'class="code"' in r.text
        # a mapping line that is not "name: value": refused here, nothing sent
        r = post(browser, page_path, f"{action}/response_headers", {"add": "no colon"})
        err = re.search(r'id="m-response_headers-err-add">([^<]*)', r.text)
        assert r.status_code == 400 and err and "no colon" in err.group(1)
        with server.client() as api:
            assert api.get(f"{url}/response_headers").status_code == 404
            assert api.get(f"{url}/circuit_breaker").status_code == 404
        # remove
        r = post(browser, page_path, f"{action}/request_headers/delete", {})
        assert r.status_code == 303 and "removed=1" in r.headers["location"]
        with server.client() as api:
            assert api.get(f"{url}/request_headers").status_code == 404
        r = post(browser, page_path, f"{action}/no_such_module", {})
        assert r.status_code == 404


def test_a_read_only_key_gets_no_module_form(server: Server) -> None:
    with server.client() as api:
        url, page_path = _made(api, "route")
        assert api.put(f"{url}/compression", json={}).status_code == 200
        ro = api.post("/api_keys", json={"role": "read_only"}).json()
    with signed_in(server, ro["token"]) as browser:
        page = browser.get(page_path)
        assert page.status_code == 200 and 'id="modules"' not in page.text
        assert "<dt>compression</dt>" in page.text  # (shown among its members)
        r = post(browser, page_path, f"{page_path}/modules/compression/delete", {})
        assert r.status_code == 403 and "ERR_EDGEWAY_260" in r.text
    with server.client() as api:
        assert api.get(f"{url}/compression").status_code == 200
        assert api.delete(f"/api_keys/{ro['id']}").status_code == 204


def test_a_routes_page_shows_what_serves_it_down_to_the_live_tunnels(server: Server) -> None:
    label = uniq("site-")
    with server.client() as api:
        url, page_path = _made(api, "route")
        group = created(api, "/backends/tunnel_group", {"labels": {"site": label}})["id"]
        empty = created(api, "/backends/tunnel_group", {"labels": {"site": label + "x"}})["id"]
        static = created(api, "/backends/static", {"address": "10.0.0.9:8080"})["id"]
        weighted = created(api, "/backends/weighted", {"backends": {empty: 1, static: 2}})["id"]
        failover = created(api, "/backends/failover", {"backends": [group, weighted]})["id"]
        assert api.put(f"{url}/backend", json={"backend_id": failover}).status_code == 200
        token = api.post("/credentials", json={}).json()["token"]
    a = agent(server, token, {"kind": "labeled", "labels": {"site": label},
                              "forward": "http://127.0.0.1:9"})
    try:
        with signed_in(server) as browser:
            page = browser.get(page_path).text
        served = page.split('id="behind"', 1)[1].split("</section>", 1)[0]
        for backend in (failover, group, weighted, empty, static):
            assert f"/{backend}" in served, backend
        assert "tried in order" in served and "weight 2; 10.0.0.9:8080" in served
        assert served.count('class="url"') == 1 and "No live tunnel has these labels" in served
        tunnel = re.search(r'href="/dashboard/tunnels/(tn_[^"]+)"', served)
        assert tunnel, served
        with server.client() as api:
            assert api.get(f"/tunnels/{tunnel.group(1)}").json()["labels"] == {"site": label}
    finally:
        a.stop()
