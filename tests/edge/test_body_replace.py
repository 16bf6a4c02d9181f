"""The traffic policy's ``request-body-find-replace``: a cloud endpoint's policy rewrites the
request body (also one sent chunked) before forwarding it to an internal endpoint the SDK
binds, whose upstream echoes it; later rules read what matched; a request's own text in an
interpolated pattern is literal; a compressed or too large body is refused rather than passed
on unchanged; configurations it cannot honour are refused."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest

from tests.edge.agents import EdgeClient, agent
from tests.edge.test_edges import made
from tests.server import Server

HOST = "bodies.example.com"
FOUND = "actions.ngrok.request_body_find_replace.replacements"


def replace(*pairs: tuple[str, str], of: str = "request") -> dict[str, Any]:
    return {"type": f"{of}-body-find-replace",
            "config": {"replacements": [{"from": f, "to": t} for f, t in pairs]}}


FORWARD = {"type": "forward-internal", "config": {"url": "https://echo.internal"}}
POLICY = {
    "on_http_request": [
        {"expressions": ["req.url.query == 'inject'"], "actions": [
            replace(("${req.headers['x-find'][0]}", "[found]"))]},
        {"expressions": ["req.url.query == 'redos'"], "actions": [replace(("(a+)+$", "x"))]},
        {"expressions": ["req.url.query != 'inject' && req.url.query != 'redos'"], "actions": [
            replace((r"secret=\w+", "secret=[REDACTED]"),
                    (r"(\w+)@example\.com", "$1@example.org"))]},
        {"actions": [FORWARD]},
    ],
    "on_http_response": [{"actions": [{"type": "add-headers", "config": {"headers": {
        "X-Replaced": f"${{size({FOUND})}}", "X-First": f"${{{FOUND}[0].matched_content}}"}}}]}],
}


def test_a_policy_rewrites_request_bodies_before_they_go_upstream(
        srv: Server, token: str, service: int) -> None:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": HOST})
        made(api, "/endpoints", {"type": "cloud", "url": f"https://{HOST}",
                                 "traffic_policy": json.dumps(POLICY)})
    inner = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                               "domain": "echo.internal"})
    try:
        assert inner.urls == ["https://echo.internal"], inner.listeners
        with EdgeClient(srv) as web:
            url = f"https://{HOST}/echo"
            sent = b"user=ann@example.com&secret=hunter2&note=caf\xc3\xa9 \xff"
            r = web.request("POST", url, content=sent)
            assert r.status_code == 200, r.text
            assert r.content == b"user=ann@example.org&secret=[REDACTED]&note=caf\xc3\xa9 \xff"
            # (matches recorded in the order of the replacements)
            assert (r.headers["x-replaced"], r.headers["x-first"]) == ("2", "secret=hunter2")
            chunks = [b"secret=abc", b"def and bob@example.com"]
            r = web.request("POST", url, content=iter(chunks))  # sent chunked
            assert r.content == b"secret=[REDACTED] and bob@example.org", r.content
            # the request's own text in an interpolated pattern is literal: ".*" is not "all"
            r = web.request("POST", f"{url}?inject", content=b"a.*b and aXb",
                         headers={"X-Find": ".*"})
            assert r.content == b"a[found]b and aXb", r.content
            # linear time (RE2): a pattern that backtracks forever in other engines
            hostile = b"a" * 200_000 + b"b"
            r = web.request("POST", f"{url}?redos", content=hostile)
            assert r.content == hostile
            # refused rather than passed on unchanged
            r = web.request("POST", url, content=gzip.compress(b"secret=x"),
                         headers={"Content-Encoding": "gzip"})
            assert (r.status_code, r.headers["edgeway-error-code"]) == \
                (415, "ERR_EDGEWAY_4023"), r.text
            r = web.request("POST", url, content=b"x" * ((1 << 20) + 1))
            assert r.status_code == 413, r.text
            assert web.get(f"https://{HOST}/headers").status_code == 200  # no body: as it is
    finally:
        inner.stop()


RESPONSES = {
    "on_http_request": [{"actions": [FORWARD]}],
    "on_http_response": [
        {"expressions": ["req.url.path == '/headers'"], "actions": [
            replace(('"name": "svc"', '"name": "${req.url.path}"'),
                    ('"accept-encoding"', '"asked-encoding"'), of="response"),
            {"type": "compress-response", "config": {}}]},
        {"expressions": ["req.url.path.startsWith('/bytes/')"], "actions": [
            replace(("a", "b"), of="response")]},
    ],
}


def test_a_policy_rewrites_response_bodies_before_they_reach_the_client(
        srv: Server, token: str, service: int) -> None:
    host = "answers.example.com"
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        made(api, "/endpoints", {"type": "cloud", "url": f"https://{host}",
                                 "traffic_policy": json.dumps(RESPONSES)})
    inner = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                               "domain": "echo.internal"})
    try:
        with EdgeClient(srv) as web:
            # rewritten whole, then gzipped for a client that accepts it; the upstream was
            # asked for an uncompressed body (no Accept-Encoding reached it)
            r = web.get(f"https://{host}/headers", headers={"Accept-Encoding": "gzip"})
            assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
            seen = r.json()
            assert seen["name"] == "/headers", seen
            assert "accept-encoding" not in dict(seen["headers"])
            assert "asked-encoding" not in r.text  # (there was nothing to rename)
            r = web.get(f"https://{host}/bytes/1000")
            assert r.status_code == 200 and len(r.content) == 1000
            assert b"a" not in r.content and "content-length" not in r.headers
            # over the limit: cut, never passed on unchanged
            with pytest.raises(httpx.HTTPError):
                web.get(f"https://{host}/bytes/{(1 << 20) + 10}")
            r = web.get(f"https://{host}/other")  # no rule: as the upstream sent it
            assert r.text == "svc /other"
    finally:
        inner.stop()


@pytest.mark.parametrize(("phase", "config", "said"), [
    ("on_http_request", {}, "replacements"),
    ("on_http_request", {"replacements": []}, "at least one"),
    ("on_http_request", {"replacements": [{"from": "(", "to": "x"}]}, "pattern"),
    ("on_http_request", {"replacements": [{"from": "(a)", "to": "$2"}]}, "group 2"),
    ("on_http_response", {"replacements": [{"from": "a", "to": "b"}]},
     "request-body-find-replace"),
    ("on_tcp_connect", {"replacements": [{"from": "a", "to": "b"}]},
     "request-body-find-replace"),
])
def test_what_it_cannot_honour_is_refused(phase: str, config: dict[str, Any],
                                          said: str) -> None:
    from edgeway.edge.hooks import Unenforced
    from edgeway.edge.modules import traffic_policy as tp
    compiled = tp.compile({"value": json.dumps({phase: [{"actions": [
        {"type": "request-body-find-replace", "config": config}]}]})}, "r")
    assert isinstance(compiled, Unenforced) and said in compiled.what, compiled
