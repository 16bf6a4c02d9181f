"""The module pipeline: one stated order, every catalog module placed, and the phases run in
that order on scripted public connections (no sockets: ``tests/edge/scripted.py``)."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import hmac
import json

from edgeway.catalog.modules import REGISTRY
from edgeway.edge.hooks import Compiling
from edgeway.edge.modules.circuit_breaker import Breakers
from edgeway.edge.pages import Fixed
from edgeway.edge.pipeline import NOT_HOOKS, PIPELINE, Plan, compile_doc
from edgeway.edge.router import Decision
from tests.edge.scripted import converse, edge, responses

NAMES = [name for name, _ in PIPELINE]
POLICY = {
    "on_http_request": [
        {"expressions": ["req.url.path == '/teapot'"],
         "actions": [{"type": "custom-response", "config": {"status_code": 418}}]},
        {"expressions": ["req.method == 'DELETE'"], "actions": [{"type": "close-connection"}]},
    ],
    "on_http_response": [
        {"actions": [{"type": "add-headers", "config": {"headers": {
            "X-Seen": "${res.headers['x-route'][0]}"}}}]},
    ],
}
LOGIN = {"issuer": "https://idp.example.com", "client_id": "c", "client_secret": "s"}


def get(path: str, *headers: str) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"GET {path} HTTP/1.1\r\nHost: app.example.com\r\n{extra}\r\n".encode()


def routed(plan: Plan, target: Fixed) -> Decision:
    return Decision(target, "https", "https", plan)


def test_every_catalog_module_has_a_hook_or_a_stated_place() -> None:
    placed = set(NAMES) | set(NOT_HOOKS)
    assert set(REGISTRY) <= placed, set(REGISTRY) - placed
    assert set(NAMES) - set(REGISTRY) == {"basic_auth"}  # (agent binds only)
    assert len(NAMES) == len(set(NAMES))


def test_a_plan_keeps_pipeline_order_and_runs_responses_in_reverse() -> None:
    doc = {"request_headers": {"add": {"X-A": "1"}}, "compression": {},
           "response_headers": {"add": {"X-B": "2"}}, "ip_restriction": {"ip_policy_ids": []},
           "traffic_policy": {"value": json.dumps(POLICY)}, "oidc": LOGIN,
           "webhook_verification": {"provider": "github", "secret": "s"},
           "user_agent_filter": {"deny": ["bot"]}, "websocket_tcp_converter": {},
           "circuit_breaker": {}, "oauth": {"provider": {}},
           "backend": {"backend_id": "bkd_1"},
           "mutual_tls": {"certificate_authority_ids": ["ca_1"]}}
    plan = compile_doc(doc)
    order = [h.name for h in plan.hooks]
    assert order == sorted(order, key=lambda n: NAMES.index(n if n != "unenforced" else "oauth"))
    assert [h.name for h in plan.responses] == \
        ["response_headers", "traffic_policy", "compression"]
    assert plan.backend_id == "bkd_1" and plan.client_cas == ("ca_1",)
    assert plan.unenforced == "oauth (with one known provider)"  # (it names no provider)
    assert compile_doc({"compression": {"enabled": False}}).hooks == ()


def test_a_policy_answer_comes_before_the_login_and_close_sends_nothing() -> None:
    plan = compile_doc({"traffic_policy": {"value": json.dumps(POLICY)}, "oidc": LOGIN})
    http_edge, router = edge(lambda req: routed(plan, Fixed(200, (), b"backend")))

    out, closed = asyncio.run(converse(http_edge, get("/teapot") + get("/private")))
    (teapot, _, _), (login, _, body) = responses(out)
    assert teapot == 418  # the policy answered: the login never ran for it
    assert login == 503 and b"Logins need HTTPS" in body  # the next one met the login
    assert router.asked == 2

    out, closed = asyncio.run(converse(http_edge, b"DELETE /x HTTP/1.1\r\nHost: a\r\n\r\n"
                                       + get("/after")))
    assert out == b"" and closed  # close-connection: no answer, and nothing after it


def test_fixed_backend_answers_go_through_the_response_hooks() -> None:
    plan = compile_doc({"traffic_policy": {"value": json.dumps(POLICY)}, "compression": {},
                        "response_headers": {"add": {"X-Route": "r1"}, "remove": ["Server"]}})
    body = b'{"n": "' + b"x" * 4000 + b'"}'
    answer = Fixed(200, (("Content-Type", "application/json"), ("Server", "fixed")), body)
    http_edge, _ = edge(lambda req: routed(plan, answer))
    out, _ = asyncio.run(converse(http_edge, get("/", "Accept-Encoding: gzip") + get("/")))
    (status, headers, zipped), (_, plain_headers, plain) = responses(out)
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert gzip.decompress(zipped) == body and plain == body
    # the policy saw the response header that response_headers added before it
    assert headers["x-route"] == "r1" and headers["x-seen"] == "r1" and "server" not in headers
    assert "content-encoding" not in plain_headers


def test_the_breaker_counts_fixed_server_errors_and_opens() -> None:
    breakers = Breakers()
    plan = compile_doc({"circuit_breaker": {"volume_threshold": 3, "tripped_duration": 60}},
                       Compiling(key="rt_1", breakers=breakers))
    http_edge, _ = edge(lambda req: routed(plan, Fixed(500, (), b"no")))
    out, _ = asyncio.run(converse(http_edge, get("/") * 5))
    assert [s for s, _, _ in responses(out)] == [500, 500, 500, 503, 503]
    # the next snapshot with the same configuration keeps the open breaker
    again = compile_doc({"circuit_breaker": {"volume_threshold": 3, "tripped_duration": 60}},
                        Compiling(key="rt_1", breakers=Breakers(breakers)))
    assert again.check("192.0.2.1", []) is not None


def test_a_webhook_body_is_read_once_and_the_next_request_is_answered() -> None:
    plan = compile_doc({"webhook_verification": {"provider": "github", "secret": "s3cret"}})
    http_edge, _ = edge(lambda req: routed(plan, Fixed(200, (), b"delivered")))
    body = b'{"zen": "ok"}'
    sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()

    def post(signature: str) -> bytes:
        return (f"POST /hook HTTP/1.1\r\nHost: a\r\nContent-Length: {len(body)}\r\n"
                f"X-Hub-Signature-256: {signature}\r\n\r\n").encode() + body

    out, _ = asyncio.run(converse(http_edge, post("sha256=00") + post(sig) + get("/")))
    assert [(s, b) for s, _, b in responses(out)][:2] == [
        (403, responses(out)[0][2]), (200, b"delivered")]
    assert b"valid github webhook signature" in responses(out)[0][2]
    assert len(responses(out)) == 3
