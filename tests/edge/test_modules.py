"""Edge module logic on its own (no sockets): breaker counting over a rolling window, what
gets compressed, IP and user agent rules, basic auth, header changes."""

from __future__ import annotations

import base64
import gzip
import ipaddress

from edgeway.edge.hooks import Compiling
from edgeway.edge.modules import circuit_breaker, compression
from edgeway.edge.modules.basic_auth import allows
from edgeway.edge.modules.circuit_breaker import Breaker
from edgeway.edge.modules.oidc import Login
from edgeway.edge.modules.request_headers import HeaderChange
from edgeway.edge.modules.webhook_verification import Verifier
from edgeway.edge.pipeline import compile_doc


def ua(agent: str) -> list[tuple[bytes, bytes]]:
    return [(b"User-Agent", agent.encode())]


def test_breaker_trips_on_the_error_share_and_reopens_after_the_trip() -> None:
    b = Breaker(circuit_breaker.config({"volume_threshold": 4, "tripped_duration": 30,
                                         "error_threshold_percentage": 0.5,
                                         "rolling_window": 10, "num_buckets": 10}))
    for t, error in ((0.0, False), (1.0, True), (2.0, False)):
        b.record(error, now=t)
    assert b.allows(now=2.5)  # 3 requests: under the volume threshold
    b.record(False, now=3.0)
    assert b.allows(now=3.5)  # 4 requests, 25% errors
    b.record(True, now=4.0)
    b.record(True, now=4.1)  # 6 requests, 50% errors: trips
    assert not b.allows(now=4.2) and not b.allows(now=34.0)
    assert b.allows(now=34.2)


def test_breaker_forgets_requests_older_than_the_window() -> None:
    b = Breaker(circuit_breaker.config({"volume_threshold": 3, "rolling_window": 10,
                                         "num_buckets": 10}))
    b.record(True, now=0.0)
    b.record(True, now=1.0)
    b.record(True, now=15.0)  # the first two left the window: 1 request counted
    assert b.allows(now=15.5)


def test_what_is_compressed() -> None:
    gz = [(b"accept-encoding", b"gzip, br")]
    json_ = [(b"content-type", b"application/json")]
    assert compression.wanted(gz, 200, json_, head=False)
    assert not compression.wanted([], 200, json_, head=False)
    assert not compression.wanted(gz, 200, json_, head=True)
    assert not compression.wanted(gz, 304, json_, head=False)
    assert not compression.wanted(gz, 200, [(b"content-type", b"image/png")], head=False)
    assert not compression.wanted(gz, 200, [*json_, (b"content-encoding", b"br")], head=False)
    assert not compression.wanted(gz, 200, [*json_, (b"content-length", b"12")], head=False)
    headers = compression.rewrite([*json_, (b"content-length", b"9000"), (b"etag", b'"x"'),
                                   (b"vary", b"Origin")])
    assert (b"content-length", b"9000") not in headers and (b"etag", b'W/"x"') in headers
    assert (b"Vary", b"Origin, Accept-Encoding") in headers
    z = compression.Gzip()
    body = z.data(b"a" * 5000) + z.flush() + z.data(b"b" * 10) + z.end()
    assert gzip.decompress(body) == b"a" * 5000 + b"b" * 10


def test_ip_and_user_agent_rules() -> None:
    rules = {"ipp_1": [("deny", ipaddress.ip_network("10.1.0.0/16")),
                       ("allow", ipaddress.ip_network("10.0.0.0/8"))],
             "ipp_empty": [], "ipp_deny": [("deny", ipaddress.ip_network("10.1.0.0/16"))]}
    ctx = Compiling(rules)
    plan = compile_doc({"ip_restriction": {"ip_policy_ids": ["ipp_1"]},
                        "user_agent_filter": {"deny": ["(?i)bot"]}}, ctx)
    assert plan.check("10.2.3.4", ua("Firefox")) is None
    assert plan.check("10.1.3.4", ua("Firefox")).status == 403  # type: ignore[union-attr]
    assert plan.check("192.0.2.1", ua("Firefox")) is not None  # not allowed
    assert plan.check("10.2.3.4", ua("GoodBot/1")) is not None
    assert plan.connect("10.2.3.4", 1) is True and plan.connect("10.1.3.4", 1) is False
    nothing = compile_doc({"ip_restriction": {"ip_policy_ids": ["ipp_empty"]}}, ctx)
    assert nothing.check("10.2.3.4", []) is not None  # no rules: nothing allowed
    deny_only = compile_doc({"ip_restriction": {"ip_policy_ids": ["ipp_deny"]}}, ctx)
    assert deny_only.check("10.2.3.4", []) is not None  # no allow rule matches it
    off = compile_doc({"ip_restriction": {"enabled": False,
                                          "ip_policy_ids": ["ipp_empty"]}}, ctx)
    assert off.check("10.2.3.4", []) is None


def test_unenforced_modules_refuse_and_headers_change() -> None:
    plan = compile_doc({"saml": {"idp_metadata": "x"}, "request_headers": {
        "add": {"X-A": "1"}, "remove": ["X-Secret"]}})
    refusal = plan.check("127.0.0.1", [])
    assert refusal is not None and refusal.status == 503 and b"saml" in refusal.body
    assert plan.connect("127.0.0.1", 1) is False
    airship = compile_doc({"webhook_verification": {"provider": "airship", "secret": "s"}})
    refusal = airship.check("127.0.0.1", [])
    assert refusal is not None and b"provider &#x27;airship&#x27;" in refusal.body
    enforced = compile_doc({"oidc": {"issuer": "https://idp.example.com",
                                     "client_id": "c", "client_secret": "s"},
                            "webhook_verification": {"provider": "github", "secret": "s"}})
    assert enforced.check("127.0.0.1", []) is None
    assert enforced.find(Login) is not None and enforced.find(Verifier) is not None
    change = plan.find(HeaderChange)
    assert change is not None and change.apply([(b"x-secret", b"s"), (b"Host", b"h")]) == [
        (b"Host", b"h"), (b"X-A", b"1")]


def test_basic_auth() -> None:
    pairs = (("alice", "correct horse"),)
    good = "Basic " + base64.b64encode(b"alice:correct horse").decode()
    assert allows(good, pairs)
    assert not allows("Basic " + base64.b64encode(b"alice:wrong").decode(), pairs)
    assert not allows("Bearer x", pairs) and not allows("Basic !!!", pairs)
