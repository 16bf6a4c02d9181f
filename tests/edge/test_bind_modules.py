"""What the official SDK can ask of the edge for its own tunnels: a traffic policy, webhook
verification, user agent filters and an OIDC login (with allowed emails) on an HTTPS
endpoint, a traffic policy on a TCP endpoint; and clear refusals for what cannot be
enforced."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.edge.agents import EdgeClient, agent
from tests.server import Server, trust

POLICY = json.dumps({
    "on_http_request": [
        {"expressions": ["req.url.path == '/admin'"],
         "actions": [{"type": "deny", "config": {"status_code": 404}}]}],
    "on_http_response": [
        {"actions": [{"type": "add-headers", "config": {"headers": {"X-Policy": "bind"}}}]}],
})


def test_policy_webhook_and_user_agents_on_an_sdk_endpoint(srv: Server, token: str,
                                                           service: int) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                           "policy": POLICY, "webhook": ["github", "s3cret"],
                           "deny_ua": ["(?i)badbot"]})
    try:
        (url,) = a.urls
        body = b'{"zen": "keep it logically awesome"}'
        sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
        with EdgeClient(srv) as web:
            r = web.request("POST", f"{url}/headers", content=body,
                            headers={"X-Hub-Signature-256": sig})
            assert r.status_code == 200 and r.json()["body"] == len(body)
            assert r.headers["x-policy"] == "bind"
            r = web.request("POST", f"{url}/headers", content=body)
            assert r.status_code == 403 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_3204"
            r = web.request("POST", f"{url}/admin", content=body,
                            headers={"X-Hub-Signature-256": sig})
            assert r.status_code == 404  # the policy ran first
            r = web.request("POST", f"{url}/headers", content=body,
                            headers={"X-Hub-Signature-256": sig, "User-Agent": "BadBot/1"})
            assert r.status_code == 403 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4007"
    finally:
        a.stop()


def test_oidc_login_with_allowed_emails_on_an_sdk_endpoint(srv: Server, token: str,
                                                           service: int, issuer: str) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                           "oidc": [issuer, "sdk-client", "sdk-secret", ["alice@example.com"]]})
    try:
        (url,) = a.urls
        # eve claims alice's address, which the provider did not verify
        r = httpx.put(f"{issuer}/users/eve", json={"email": "alice@example.com",
                                                   "email_verified": False}, verify=trust())
        assert r.status_code == 204, r.text
        with EdgeClient(srv) as web:
            outcomes = {}
            for user in ("alice@example.com", "mallory@example.com", "eve"):
                web.http.cookies.clear()
                r = web.get(f"{url}/headers")
                assert r.status_code == 302, r.text
                state = r.headers["set-cookie"].split(";", 1)[0]
                authorize = r.headers["location"]
                assert parse_qs(urlsplit(authorize).query)["client_id"] == ["sdk-client"]
                back = httpx.post(authorize, data={"sub": user}, follow_redirects=False,
                                  verify=trust())
                callback = urlsplit(back.headers["location"])
                web.http.cookies.clear()
                r = web.get(f"{url}{callback.path}?{callback.query}", headers={"Cookie": state})
                outcomes[user] = r.status_code
                if r.status_code == 302:
                    session = r.headers["set-cookie"].split(";", 1)[0]
                    web.http.cookies.clear()
                    seen = dict(web.get(f"{url}/headers",
                                        headers={"Cookie": session}).json()["headers"])
                    assert seen["edgeway-auth-user-email"] == user
            assert outcomes == {"alice@example.com": 302, "mallory@example.com": 403,
                                "eve": 403}
    finally:
        a.stop()


def test_a_tcp_endpoint_policy_closes_connections(srv: Server, token: str,
                                                  echo_port: int) -> None:
    policy = json.dumps({"on_tcp_connect": [
        {"expressions": ["conn.client_ip == '127.0.0.1'"], "actions": [{"type": "deny"}]}]})
    a = agent(srv, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo_port}",
                           "policy": policy})
    try:
        port = int(a.urls[0].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"ping")
            with contextlib.suppress(ConnectionResetError):  # (closed with "ping" unread)
                assert s.recv(10) == b""
    finally:
        a.stop()


def test_what_cannot_be_enforced_is_refused_at_bind(srv: Server, token: str,
                                                    service: int, issuer: str) -> None:
    forward = f"http://127.0.0.1:{service}"
    jwt = json.dumps({"on_http_request": [{"actions": [{"type": "jwt-validation",
                                                        "config": {}}]}]})
    a = agent(srv, token,
              {"kind": "https", "forward": forward, "policy": jwt},
              {"kind": "https", "forward": forward, "webhook": ["airship", "x"]},
              {"kind": "https", "forward": forward, "deny_ua": ["(unclosed"]},
              {"kind": "http", "forward": forward, "oidc": [issuer, "c", "s"]},
              {"kind": "https", "forward": forward, "policy": "{not: [valid"})
    try:
        errors = [ln.get("error", "") for ln in a.listeners]
        assert "'jwt-validation' in on_http_request" in errors[0]
        assert "provider 'airship'" in errors[1]
        assert "not a valid regular expression" in errors[2]
        assert "need an https tunnel" in errors[3]
        assert "traffic policy is not valid" in errors[4]
        assert all("ERR_NGROK_8000" in e for e in errors)
    finally:
        a.stop()


def test_the_sdks_policy_with_the_earlier_phase_names(srv: Server, token: str, service: int,
                                                      echo_port: int) -> None:
    """The SDKs' ``policy()`` (``inbound``/``outbound``, the phases' earlier names): enforced
    on HTTP as on_http_request and on_http_response, on TCP inbound as on_tcp_connect; a name
    with no phase here, or a phase given under both names, is refused saying so."""
    http = json.dumps({
        "inbound": [{"expressions": ["req.method == 'POST'"],
                     "actions": [{"type": "custom-response",
                                  "config": {"status_code": 405, "content": "no posts"}}]},
                    {"expressions": ["req.url.path.startsWith('/staff')"],
                     "actions": [{"type": "basic-auth", "config": {
                         "credentials": ["alice:correct horse"]}}]}],
        "outbound": [{"actions": [{"type": "add-headers",
                                   "config": {"headers": {"x-legacy": "outbound"}}}]}]})
    tcp = json.dumps({"inbound": [{"actions": [{"type": "deny"}]}]})
    both = json.dumps({"inbound": [{"actions": [{"type": "deny"}]}],
                       "on_http_request": [{"actions": [{"type": "deny"}]}]})
    a = agent(srv, token,
              {"kind": "https", "forward": f"http://127.0.0.1:{service}", "legacy_policy": http},
              {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo_port}", "legacy_policy": tcp},
              {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo_port}", "legacy_policy": http},
              {"kind": "https", "forward": f"http://127.0.0.1:{service}", "legacy_policy": both})
    try:
        assert [ln.get("error", "") for ln in a.listeners[:2]] == ["", ""], a.listeners
        assert "outbound (an earlier name of a phase) has no phase here" in \
            a.listeners[2].get("error", ""), a.listeners
        assert "inbound is an earlier name of on_http_request, which is given too" in \
            a.listeners[3].get("error", ""), a.listeners
        with EdgeClient(srv) as web:
            got = web.get(a.urls[0] + "/x")
            assert got.text == "svc /x" and got.headers["x-legacy"] == "outbound"
            posted = web.request("POST", a.urls[0] + "/x", content=b"body")
            assert posted.status_code == 405 and posted.text == "no posts"
            refused = web.get(a.urls[0] + "/staff/x")
            assert refused.status_code == 401 and "svc" not in refused.text
            assert refused.headers["www-authenticate"] == 'Basic realm="edgeway"'
            let_in = web.get(a.urls[0] + "/staff/x", auth=("alice", "correct horse"))
            assert let_in.text == "svc /staff/x"
        port = int(a.urls[1].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"ping")
            with contextlib.suppress(ConnectionResetError):  # (closed with "ping" unread)
                assert s.recv(10) == b""
    finally:
        a.stop()


def test_compress_response_gzips_what_the_client_accepts(srv: Server, token: str,
                                                          service: int) -> None:
    """compress-response (in a request rule: that request's answer; in a response rule), as
    the compression module does it: gzip when the client accepts it, not otherwise; other
    algorithms than gzip are refused at bind."""
    policy = json.dumps({
        "on_http_request": [{"expressions": ["req.url.path.startsWith('/zip')"],
                             "actions": [{"type": "compress-response"}]}],
        "on_http_response": [{"expressions": ["req.url.path.startsWith('/later')"],
                              "actions": [{"type": "compress-response",
                                           "config": {"algorithms": ["br", "gzip"]}}]}]})
    brotli = json.dumps({"on_http_response": [{"actions": [{
        "type": "compress-response", "config": {"algorithms": ["br"]}}]}]})
    a = agent(srv, token,
              {"kind": "https", "forward": f"http://127.0.0.1:{service}", "policy": policy},
              {"kind": "https", "forward": f"http://127.0.0.1:{service}", "policy": brotli})
    try:
        assert "this edge writes gzip" in a.listeners[1].get("error", ""), a.listeners
        with EdgeClient(srv) as web:
            for path, zipped in (("/zip/a", True), ("/later/b", True), ("/plain", False)):
                r = web.get(a.urls[0] + path, headers={"Accept-Encoding": "gzip"})
                assert r.text == f"svc {path}", r.text
                assert (r.headers.get("content-encoding") == "gzip") is zipped, (path, r.headers)
            r = web.get(a.urls[0] + "/zip/c", headers={"Accept-Encoding": "identity"})
            assert r.text == "svc /zip/c" and "content-encoding" not in r.headers
    finally:
        a.stop()
