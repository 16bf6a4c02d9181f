"""The traffic_policy module, evaluated on scripted requests: CEL expressions select rules,
actions run in order, and a policy using an action this edge does not enforce is refused
whole."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from typing import Any

import pytest

from edgeway.edge.hooks import Unenforced
from edgeway.edge.modules import traffic_policy as tp
from tests.edge.agents import EdgeClient
from tests.edge.test_edges import made, route
from tests.server import Server, free_port

POLICY = {
    "on_http_request": [
        {"name": "admin", "expressions": ["req.url.path.startsWith('/admin')"],
         "actions": [{"type": "deny", "config": {"status_code": 404}}]},
        {"name": "teapot", "expressions": ["req.url.path == '/teapot'"],
         "actions": [{"type": "custom-response", "config": {
             "status_code": 418, "content": "short and stout: ${req.method}",
             "headers": {"X-Kind": "teapot"}}}]},
        {"name": "go", "expressions": ["req.url.path.startsWith('/go/')"],
         "actions": [{"type": "redirect", "config": {
             "from": "^https://[^/]+/go/(.*)$", "to": "https://docs.example.org/$1",
             "status_code": 301}}]},
        {"name": "old", "actions": [{"type": "url-rewrite", "config": {
            "from": "/old/([a-z]+)", "to": "/new/$1"}}]},
        {"name": "tag", "expressions": ["'x-trace' in req.headers"],
         "actions": [{"type": "add-headers", "config": {"headers": {
             "X-Seen-Trace": "${req.headers['x-trace'][0]}"}}},
                     {"type": "remove-headers", "config": {"headers": ["X-Trace"]}}]},
        {"name": "office", "expressions": ["req.url.path == '/office'"],
         "actions": [{"type": "restrict-ips", "config": {"allow": ["10.0.0.0/8"]}}]},
        {"name": "limit", "expressions": ["req.url.path == '/limited'"],
         "actions": [{"type": "rate-limit", "config": {
             "name": "two a minute", "algorithm": "sliding_window", "capacity": 2,
             "rate": "60s", "bucket_key": ["conn.client_ip"]}}]},
        {"name": "audit", "expressions": ["req.url.path == '/audited'"],
         "actions": [{"type": "log", "config": {"metadata": {"audit": "marker123", "n": 1}}}]},
        {"name": "bye", "expressions": ["req.method == 'DELETE'"],
         "actions": [{"type": "close-connection"}]},
    ],
    "on_http_response": [
        {"expressions": ["res.status_code >= 200"],
         "actions": [{"type": "add-headers", "config": {"headers": {
             "X-Status": "${res.status_code}"}}},
                     {"type": "remove-headers", "config": {"headers": ["Server"]}}]},
        {"expressions": ["req.url.path == '/audited'"],
         "actions": [{"type": "log", "config": {"metadata": "answered ${res.status_code}"}}]},
    ],
}


def compiled(doc: dict[str, Any] = POLICY) -> tp.Policy:
    policy = tp.compile({"value": json.dumps(doc)}, "route-1")
    assert isinstance(policy, tp.Policy), policy
    return policy


def run(path: str, method: bytes = b"GET", ip: str = "192.0.2.1",
        headers: list[tuple[bytes, bytes]] | None = None,
        limits: tp.RateLimits | None = None, now: float = 0.0) -> tp.Outcome:
    heads = [(b"Host", b"app.example.com"), *(headers or [])]
    env = tp.request_env(method, path.encode(), heads, "app.example.com", "https", ip, 5000,
                         False)
    return compiled().on_request(env, heads, path.encode(), limits or tp.RateLimits(), now)


def test_enforced_policies_compile_with_nothing_unsupported() -> None:
    policy = compiled()
    assert policy.has("on_http_request")


@pytest.mark.parametrize(("path", "status", "body"), [
    ("/admin/users", 404, b"Denied by the traffic policy (404).\n"),
    ("/teapot", 418, b"short and stout: GET"),
])
def test_terminating_answers(path: str, status: int, body: bytes) -> None:
    out = run(path)
    assert (out.status, out.body) == (status, body)


def test_custom_response_headers_and_redirects() -> None:
    assert ("X-Kind", "teapot") in run("/teapot").answer_headers
    out = run("/go/guide?x=1")
    assert out.status == 301
    assert ("Location", "https://docs.example.org/guide?x=1") in out.answer_headers


def test_rewrites_and_header_changes_go_on_to_the_upstream() -> None:
    out = run("/old/page?q=2", headers=[(b"X-Trace", b"abc")])
    assert out.status == 0 and not out.close
    assert out.target == b"/new/page?q=2"
    assert (b"X-Seen-Trace", b"abc") in out.headers
    assert all(k.lower() != b"x-trace" for k, _ in out.headers)
    assert run("/plain").target == b"/plain"  # no rule but the rewrite's, which missed


def test_restrict_ips_and_close_connection() -> None:
    assert run("/office", ip="10.1.2.3").status == 0
    assert run("/office", ip="192.0.2.1").status == 403
    assert run("/x", method=b"DELETE").close


def test_rate_limit_sliding_window() -> None:
    limits = tp.RateLimits()
    assert [run("/limited", limits=limits, now=t).status for t in (0, 1, 2)] == [0, 0, 429]
    out = run("/limited", limits=limits, now=30)
    assert out.status == 429 and ("Retry-After", "30") in out.answer_headers
    assert run("/limited", ip="192.0.2.99", limits=limits, now=30).status == 0  # own bucket
    assert run("/limited", limits=limits, now=60.5).status == 0  # the first hit left


def test_response_phase() -> None:
    policy = compiled()
    env = tp.request_env(b"GET", b"/", [], "h", "https", "192.0.2.1", 1, False)
    headers = [(b"Server", b"upstream/1"), (b"X-Kept", b"1")]
    out = policy.on_response(tp.response_env(env, 201, headers), headers)
    assert out == [(b"X-Kept", b"1"), (b"X-Status", b"201")]


def test_tcp_connect_phase() -> None:
    policy = compiled({"on_tcp_connect": [
        {"expressions": ["conn.client_ip == '192.0.2.66'"], "actions": [{"type": "deny"}]},
        {"actions": [{"type": "restrict-ips", "config": {"allow": ["0.0.0.0/0"],
                                                         "deny": ["198.51.100.0/24"]}}]},
    ]})
    assert policy.on_tcp_connect("192.0.2.1", 1)
    assert not policy.on_tcp_connect("192.0.2.66", 1)
    assert not policy.on_tcp_connect("198.51.100.7", 1)
    assert not policy.on_tcp_connect("2001:db8::1", 1)  # no allow rule for IPv6
    deny_only = compiled({"on_tcp_connect": [
        {"actions": [{"type": "restrict-ips", "config": {"deny": ["198.51.100.0/24"]}}]}]})
    assert not deny_only.on_tcp_connect("192.0.2.1", 1)  # an allow rule must match


@pytest.mark.parametrize(("action", "named"), [
    ({"type": "jwt-validation", "config": {}}, "'jwt-validation' in on_http_request"),
    ({"type": "restrict-ips", "config": {"ip_policies": ["ipp_1"]}},
     "IP policy ipp_1 does not exist"),
    ({"type": "rate-limit", "config": {"capacity": 1, "rate": "soon"}}, "'rate-limit'"),
    ({"type": "basic-auth", "config": {"credentials": ["alice:short"]}}, "8 to 128"),
    ({"type": "basic-auth", "config": {}}, "basic-auth without credentials"),
])
def test_policies_with_unenforced_actions_are_refused(action: dict[str, Any],
                                                      named: str) -> None:
    policy = tp.compile({"value": json.dumps({"on_http_request": [{"actions": [action]}]})},
                        "route-1")
    assert isinstance(policy, Unenforced) and named in policy.what


def test_an_expression_that_fails_matches_nothing() -> None:
    policy = compiled({"on_http_request": [
        {"expressions": ["req.headers['missing'][0] == 'x'"], "actions": [{"type": "deny"}]}]})
    env = tp.request_env(b"GET", b"/", [], "h", "https", "192.0.2.1", 1, False)
    assert policy.on_request(env, [], b"/", tp.RateLimits(), 0).status == 0


# -- end to end: an HTTPS edge route and a TCP edge with policies ------------------------------

HOST = "policy.example.com"


def test_policies_on_real_traffic(srv: Server, service: int, echo_port: int) -> None:
    port = free_port()
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": HOST})
        edge = made(api, "/edges/https", {"hostports": [f"{HOST}:443"]})
        svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
        echo = made(api, "/backends/static", {"address": f"127.0.0.1:{echo_port}"})
        route(api, edge["id"], "path_prefix", "/", svc["id"],
              traffic_policy={"value": json.dumps(POLICY)})
        answer = made(api, "/backends/http_response", {"body": "fixed", "status_code": 202})
        route(api, edge["id"], "path_prefix", "/fixed", answer["id"],
              traffic_policy={"value": json.dumps(POLICY)})
        route(api, edge["id"], "path_prefix", "/jwt", svc["id"], traffic_policy={
            "value": json.dumps({"on_http_request": [
                {"actions": [{"type": "jwt-validation", "config": {}}]}]})})
        made(api, "/edges/tcp", {
            "hostports": [f"db.edgeway.localhost:{port}"], "backend": {"backend_id": echo["id"]},
            "traffic_policy": {"value": json.dumps({"on_tcp_connect": [
                {"expressions": ["conn.client_ip == '127.0.0.1'"],
                 "actions": [{"type": "log", "config": {"metadata": {"ip": "${conn.client_ip}"}}},
                             {"type": "deny"}]}]})}})
    with EdgeClient(srv) as web:
        base = f"https://{HOST}"
        r = web.get(f"{base}/admin")
        assert r.status_code == 404 and "traffic policy" in r.text
        r = web.get(f"{base}/old/page")
        assert r.text == "svc /new/page"  # rewritten before it reached the upstream
        assert r.headers["x-status"] == "200" and "server" not in r.headers
        seen = dict(web.get(f"{base}/headers", headers={"X-Trace": "t-1"}).json()["headers"])
        assert seen["x-seen-trace"] == "t-1" and "x-trace" not in seen
        assert [web.get(f"{base}/limited").status_code for _ in range(3)] == [200, 200, 429]
        r = web.get(f"{base}/fixed")  # the edge's own answer goes through the policy too
        assert (r.status_code, r.text, r.headers["x-status"]) == (202, "fixed", "202")
        r = web.get(f"{base}/jwt/x")
        assert r.status_code == 503 and "jwt-validation" in r.text
        assert web.get(f"{base}/audited").status_code == 200
    deadline = time.monotonic() + 10
    while True:  # the TCP edge's listener comes up with the snapshot; then refuses us
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"ping")
                with contextlib.suppress(ConnectionResetError):  # (closed with our bytes
                    assert s.recv(10) == b""  # unread: a reset) closed without a byte through
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    logged = [json.loads(x) for x in srv.log().splitlines() if '"policy_log"' in x]
    assert [(x["phase"], x["metadata"]) for x in logged] == [
        ("on_http_request", {"audit": "marker123", "n": 1}),
        ("on_http_response", "answered 200"), ("on_tcp_connect", {"ip": "127.0.0.1"})]


def test_basic_auth_action() -> None:
    """basic-auth in a rule: only the requests its expressions match need the credentials;
    the wrong pair or none is a 401 with the realm; ``enforce: false`` only logs."""
    import base64
    policy = compiled({"on_http_request": [
        {"expressions": ["req.url.path.startsWith('/private')"],
         "actions": [{"type": "basic-auth", "config": {
             "realm": "staff", "credentials": ["alice:correct horse", "bob:battery staple"]}}]},
        {"expressions": ["req.url.path == '/soft'"],
         "actions": [{"type": "basic-auth", "config": {
             "credentials": ["alice:correct horse"], "enforce": False}}]}]})

    def ask(path: str, pair: str = "") -> tp.Outcome:
        heads = [(b"Host", b"app.example.com")]
        if pair:
            heads.append((b"Authorization", b"Basic " + base64.b64encode(pair.encode())))
        env = tp.request_env(b"GET", path.encode(), heads, "app.example.com", "https",
                             "192.0.2.1", 5000, False)
        return policy.on_request(env, heads, path.encode(), tp.RateLimits(), 0.0)

    assert ask("/open").status == 0
    for pair in ("", "alice:wrong password", "mallory:correct horse"):
        out = ask("/private/x", pair)
        assert out.status == 401, pair
        assert ("WWW-Authenticate", 'Basic realm="staff"') in out.answer_headers
    assert ask("/private/x", "bob:battery staple").status == 0
    assert ask("/soft").status == 0


def test_set_vars_reach_later_rules_and_the_response() -> None:
    policy = compiled({
        "on_http_request": [
            {"actions": [{"type": "set-vars", "config": {"vars": [
                {"who": "${req.headers['x-user'][0]}"}, {"tier": 2}]}}]},
            {"expressions": ["vars.who == 'mallory'"],
             "actions": [{"type": "deny", "config": {"status_code": 451}}]},
            {"expressions": ["vars.tier == 2"],
             "actions": [{"type": "add-headers", "config": {"headers": {
                 "X-Who": "${vars.who}"}}}]}],
        "on_http_response": [
            {"actions": [{"type": "set-vars", "config": {"vars": [{"answered": "yes"}]}},
                         {"type": "add-headers", "config": {"headers": {
                             "X-Seen": "${vars.who}/${vars.answered}"}}}]}]})
    heads = [(b"Host", b"app.example.com"), (b"X-User", b"alice")]
    env = tp.request_env(b"GET", b"/", heads, "app.example.com", "https", "192.0.2.1", 5000,
                         False)
    out = policy.on_request(env, heads, b"/", tp.RateLimits(), 0.0)
    assert out.status == 0 and (b"X-Who", b"alice") in out.headers
    answered = policy.on_response(tp.response_env(env, 200, []), [])
    assert (b"X-Seen", b"alice/yes") in answered
    heads[1] = (b"X-User", b"mallory")
    env = tp.request_env(b"GET", b"/", heads, "app.example.com", "https", "192.0.2.1", 5000,
                         False)
    assert policy.on_request(env, heads, b"/", tp.RateLimits(), 0.0).status == 451
    tcp = compiled({"on_tcp_connect": [
        {"actions": [{"type": "set-vars", "config": {"vars": [
            {"office": "${conn.client_ip.startsWith('10.')}"}]}}]},
        {"expressions": ["vars.office != 'true'"], "actions": [{"type": "deny"}]}]})
    assert tcp.on_tcp_connect("10.1.2.3", 1) and not tcp.on_tcp_connect("192.0.2.1", 1)
    bad = tp.compile({"value": json.dumps({"on_http_request": [{"actions": [
        {"type": "set-vars", "config": {"vars": [{"a": 1, "b": 2}]}}]}]})}, "r")
    assert isinstance(bad, Unenforced) and "one-key object" in bad.what
