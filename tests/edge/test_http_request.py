"""The traffic policy's ``http-request``: a cloud endpoint's policy calls an internal endpoint
the official SDK binds and reads its answer in later rules (status, headers, body) before
answering; redirects are followed between internal endpoints, retries follow
``retry_condition``, the whole is bounded by ``timeout``; an offline endpoint, or one with a
policy of its own (which the call would skip), is an error the policy reads or that halts it
(502); a URL outside the internal endpoints is refused when the policy is compiled."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.edge.agents import EdgeClient, agent
from tests.edge.test_edges import made
from tests.server import Server

HOST = "calls.example.com"


def call(url: str, **config: Any) -> dict[str, Any]:
    return {"type": "http-request", "config": {"url": url, **config}}


def answer(content: str, status: int = 200) -> dict[str, Any]:
    return {"type": "custom-response", "config": {"status_code": status, "content": content}}


def on(path: str, *actions: dict[str, Any]) -> dict[str, Any]:
    return {"expressions": [f"req.url.path == '{path}'"], "actions": list(actions)}


RES = "actions.ngrok.http_request.res"
ERR = "actions.ngrok.http_request.error"
POLICY = {"on_http_request": [
    on("/ask", call("https://svc.internal/headers", method="POST",
                    headers={"X-Asked-For": "${req.url.path}"}, body="ping",
                    query_params=[{"key": "q", "value": "1"}]),
       answer(f"${{{RES}.status_code}} ${{{RES}.header['x-upstream'][0]}} ${{{RES}.body}}")),
    # an auth subrequest: the answer decides whether the request goes on
    {"expressions": ["req.url.path == '/gate'"], "actions": [
        call("https://svc.internal/${req.url.query == 'open' ? 'open' : 'hang'}",
             timeout="1s")]},
    {"expressions": ["req.url.path == '/gate'",
                     f"!has({RES}) || {RES}.status_code != 200"],
     "actions": [answer("refused", 403)]},
    on("/gate", answer("let in")),
    on("/moved", call("https://redirects.internal/r/2"), answer(f"${{{RES}.body}}")),
    on("/again", call("https://svc.internal/headers", retry_condition="attempts < 3"),
       answer("${size(actions.ngrok.http_request.attempts)}")),
    on("/offline", call("https://gone.internal/", on_error="halt")),
    on("/soft", call("https://gone.internal/"), answer(f"${{{ERR}.code}}")),
    on("/guarded", call("https://guarded.internal/"), answer(f"${{{ERR}.code}}")),
    on("/slow", call("https://svc.internal/hang", timeout="1s", on_error="halt")),
    on("/split", {"type": "set-vars", "config": {"vars": [{"v": "a\r\nX-Injected: yes"}]}},
       call("https://svc.internal/headers", headers={"X-V": "${vars.v}"}),
       answer(f"${{{ERR}.code}}")),
]}


class Redirects(BaseHTTPRequestHandler):
    """``/r/N`` redirects N times (relative Locations), then answers ``arrived``."""

    def do_GET(self) -> None:
        left = int(self.path.rsplit("/", 1)[1]) if self.path.startswith("/r/") else 0
        if left:
            self.send_response(302)
            self.send_header("Location", f"/r/{left - 1}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "7")
        self.end_headers()
        self.wfile.write(b"arrived")

    def log_message(self, *_args: Any) -> None:
        pass


@contextlib.contextmanager
def redirecting() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirects)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_policy_calls_an_internal_endpoint_and_reads_its_answer(
        srv: Server, token: str, service: int) -> None:
    with srv.client() as api, redirecting() as redirects:
        made(api, "/reserved_domains", {"domain": HOST})
        made(api, "/endpoints", {"type": "cloud", "url": f"https://{HOST}",
                                 "traffic_policy": json.dumps(POLICY)})
        forward = f"http://127.0.0.1:{service}"
        inner = agent(srv, token,
                      {"kind": "https", "forward": forward, "domain": "svc.internal"},
                      {"kind": "https", "forward": f"http://127.0.0.1:{redirects}",
                       "domain": "redirects.internal"},
                      {"kind": "https", "forward": forward, "domain": "guarded.internal",
                       "policy": json.dumps({"on_http_request": [{"actions": [
                           {"type": "deny", "config": {"status_code": 403}}]}]})})
        try:
            assert inner.urls == ["https://svc.internal", "https://redirects.internal",
                                  "https://guarded.internal"]
            with EdgeClient(srv) as web:
                base = f"https://{HOST}"
                r = web.get(f"{base}/ask")
                status, upstream, body = r.text.split(" ", 2)
                assert (r.status_code, status, upstream) == (200, "200", "yes"), r.text
                seen = json.loads(body)
                assert (seen["method"], seen["path"], seen["body"]) == ("POST", "/headers", 4)
                headers = dict(seen["headers"])
                assert headers["x-asked-for"] == "/ask" and headers["host"] == "svc.internal"
                # the answer decides: a 200 lets the request go on, a timeout does not
                assert web.get(f"{base}/gate?open").text == "let in"
                began = time.monotonic()
                r = web.get(f"{base}/gate")
                assert (r.status_code, r.text) == (403, "refused")
                assert time.monotonic() - began < 10  # (timeout: 1 s, not the upstream's)
                assert web.get(f"{base}/moved").text == "arrived"  # two redirects followed
                assert web.get(f"{base}/again").text == "3"  # retried while attempts < 3
                r = web.get(f"{base}/offline")
                assert r.status_code == 502
                assert r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4022"
                assert web.get(f"{base}/soft").text == "offline"
                assert web.get(f"{base}/guarded").text == "guarded"
                r = web.get(f"{base}/slow")
                assert r.status_code == 502 and "within 1 s" in r.text
                assert web.get(f"{base}/split").text == "bad_header"
        finally:
            inner.stop()


@pytest.mark.parametrize(("phase", "config", "said"), [
    ("on_http_request", {"url": "https://api.example.com/"}, "internal endpoints only"),
    ("on_http_request", {"url": "http://127.0.0.1:8080/"}, "internal endpoints only"),
    ("on_http_request", {"url": "https://api.internal:8443/"}, "no port"),
    ("on_http_request", {"url": "https://api.internal/", "method": "TRACE"}, "method"),
    ("on_http_request", {"url": "https://api.internal/", "timeout": "60s"}, "1s to 30s"),
    ("on_http_request", {"url": "https://api.internal/", "max_redirects": 500}, "0 to 100"),
    ("on_http_request", {"url": "https://api.internal/", "on_error": "retry"}, "on_error"),
    ("on_http_request", {"url": "https://api.internal/",
                         "headers": {f"h{i}": "v" for i in range(11)}}, "at most 10"),
    ("on_http_request", {"url": "https://api.internal/", "retry_condition": "attempts <"},
     "retry_condition"),
    ("on_http_request", {"url": "https://api.internal/", "headers": {"Bad Name": "x"}},
     "not a header name"),
    ("on_http_response", {"url": "https://api.example.com/"}, "internal endpoints only"),
])
def test_what_http_request_cannot_honour_is_refused(phase: str, config: dict[str, Any],
                                                    said: str) -> None:
    from edgeway.edge.hooks import Unenforced
    from edgeway.edge.modules import traffic_policy as tp
    compiled = tp.compile({"value": json.dumps({phase: [{"actions": [
        {"type": "http-request", "config": config}]}]})}, "r")
    assert isinstance(compiled, Unenforced) and said in compiled.what, compiled


def test_an_interpolated_url_or_header_cannot_break_the_request_it_makes() -> None:
    from edgeway.edge.modules.http_request import Failed, internal
    scheme, host, target = internal("https://svc.internal/a b\r\nX-Evil: 1?q=1 2\r\n")
    assert (scheme, host) == ("https", "svc.internal")
    assert target == "/a%20bX-Evil:%201?q=1%202", target  # (urlsplit drops CR and LF)
    for url in ("https://svc.internal:abc/", "https://a b.internal/", "https://internal/",
                "https://svc.internal.example.com/", "file:///etc/passwd"):
        with pytest.raises(Failed):
            internal(url)


RESPONSE_POLICY = {"on_http_response": [
    # an audit call per response: its answer goes into the response's headers
    {"expressions": ["req.url.path == '/headers'"], "actions": [
        call("https://svc.internal/headers", headers={"X-Status": "${res.status_code}"}),
        {"type": "add-headers", "config": {"headers": {
            "X-Audit": f"${{{RES}.status_code}} ${{{RES}.header['x-upstream'][0]}}",
            "X-Audit-Asked": f"${{{RES}.body.contains('x-status')}}"}}}]},
    on("/down", call("https://gone.internal/", on_error="halt")),
    on("/soft", call("https://gone.internal/"),  # (continues: the default)
       {"type": "add-headers", "config": {"headers": {"X-Err": f"${{{ERR}.code}}"}}}),
]}


def test_a_policy_calls_an_internal_endpoint_in_the_response_phase(
        srv: Server, token: str, service: int) -> None:
    """http-request in on_http_response, on an agent's endpoint (the upstream's answer) and
    on an edge route whose backend answers itself: later rules read the call's answer with
    the response's variables; a failed call that halts answers 502 instead of the upstream;
    one that continues leaves its error to the later rules."""
    forward = f"http://127.0.0.1:{service}"
    policy = json.dumps(RESPONSE_POLICY)
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": "audit.example.com"})
        edge = made(api, "/edges/https", {"hostports": ["audit.example.com:443"]})
        fixed = made(api, "/backends/http_response", {"status_code": 201, "body": "local"})
        made(api, f"/edges/https/{edge['id']}/routes", {
            "match_type": "path_prefix", "match": "/", "backend": {"backend_id": fixed["id"]},
            "traffic_policy": {"value": policy}})
    inner = agent(srv, token,
                  {"kind": "https", "forward": forward, "domain": "svc.internal"},
                  {"kind": "https", "forward": forward, "policy": policy})
    try:
        assert not any(ln.get("error") for ln in inner.listeners), inner.listeners
        with EdgeClient(srv) as web:
            for base, status in ((inner.urls[1], 200), ("https://audit.example.com", 201)):
                r = web.get(f"{base}/headers")
                assert r.status_code == status, (base, r.text)
                assert r.headers["x-audit"] == "200 yes", (base, r.headers)
                assert r.headers["x-audit-asked"] == "true"  # (its header reached svc)
                r = web.get(f"{base}/down")
                assert r.status_code == 502, (base, r.text)
                assert r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4022"
                r = web.get(f"{base}/soft")
                assert (r.status_code, r.headers["x-err"]) == (status, "offline"), base
                assert web.get(f"{base}/headers").status_code == status  # and on it goes
    finally:
        inner.stop()
