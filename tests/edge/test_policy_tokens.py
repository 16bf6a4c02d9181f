"""The traffic policy's ``jwt-validation`` and ``verify-webhook`` actions on real traffic:
tokens signed with PyJWT by keys a loopback JWKS server publishes (and rotates), webhooks
signed as GitHub signs them; what each action leaves in ``actions.ngrok.*`` for later
rules."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from edgeway.edge.hooks import Unenforced
from edgeway.edge.modules import traffic_policy as tp
from edgeway.edge.modules.jwt_validation import KeySets
from tests.edge.agents import EdgeClient
from tests.edge.test_edges import made, route
from tests.server import Server
from tests.stub_http import StubHandler, serving

ISSUER, AUDIENCE = "https://id.example.com/", "urn:edgeway:api"


class Keys:
    """A JWKS document served on loopback; ``fetches`` counts the GETs."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {"keys": []}
        self.fetches = 0
        self.down = False
        keys = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                keys.fetches += 1
                if keys.down:
                    self.send_error(503)
                    return
                body = json.dumps(keys.doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def publish(self, *pairs: tuple[str, Any]) -> None:
        out = []
        for kid, key in pairs:
            algo = RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else ECAlgorithm
            jwk = json.loads(algo.to_jwk(key.public_key()))
            out.append({**jwk, "kid": kid, "use": "sig"})
        self.doc = {"keys": out}


@pytest.fixture(scope="module")
def keys() -> Iterator[Keys]:
    k = Keys()
    yield k
    k.close()


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def token(key: Any = RSA_KEY, kid: str = "rsa-1", alg: str = "RS256", **claims: Any) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 300,
            **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm=alg,
                      headers={"kid": kid})


def policy(jku: str) -> str:
    return json.dumps({"on_http_request": [
        {"expressions": ["req.url.query == 'api'"],
         "actions": [{"type": "jwt-validation", "config": {
             "issuer": {"allow_list": [{"value": ISSUER}]},
             "audience": {"allow_list": [{"value": AUDIENCE}]},
             "http": {"tokens": [{"type": "jwt", "method": "header", "name": "Authorization",
                                  "prefix": "Bearer "}]},
             "jws": {"allowed_algorithms": ["RS256", "ES256"],
                     "keys": {"sources": {"additional_jkus": [jku]}}}}},
             {"type": "add-headers", "config": {"headers": {
                 "X-Subject": "${actions.ngrok.jwt_validation.tokens[0].claims.sub}"}}}]},
        {"expressions": ["req.url.query == 'form'"],
         "actions": [{"type": "jwt-validation", "config": {
             "issuer": {"allow_list": [{"value": ISSUER}]},
             "http": {"tokens": [{"type": "jwt", "method": "body", "name": "id_token"}]},
             "jws": {"allowed_algorithms": ["ES256"],
                     "keys": {"sources": {"additional_jkus": [jku]}}}}}]},
        {"expressions": ["req.url.query == 'hook'"],
         "actions": [{"type": "verify-webhook", "config": {
             "provider": "github", "secret": "s3cret"}}]},
        {"expressions": ["req.url.query == 'soft'"],
         "actions": [{"type": "verify-webhook", "config": {
             "provider": "github", "secret": "s3cret", "enforce": False}},
             {"type": "add-headers", "config": {"headers": {
                 "X-Verified": "${actions.ngrok.verify_webhook.verified}"}}}]},
    ]})


@pytest.fixture(scope="module")
def site(srv: Server, service: int, keys: Keys) -> str:
    host = "tokens.example.com"
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
        svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
        route(api, edge["id"], "path_prefix", "/", svc["id"],
              traffic_policy={"value": policy(keys.url)})
    return f"https://{host}"


def seen(r: Any) -> dict[str, str]:
    assert r.status_code == 200, r.text
    return dict(r.json()["headers"])


def test_jwt_validation_lets_only_valid_tokens_through(srv: Server, site: str,
                                                       keys: Keys) -> None:
    keys.publish(("rsa-1", RSA_KEY), ("ec-1", EC_KEY))
    with EdgeClient(srv) as web:
        def ask(raw: str | None, path: str = "/headers?api") -> Any:
            return web.get(f"{site}{path}",
                           headers={"Authorization": f"Bearer {raw}"} if raw else {})

        r = ask(token(sub="alice"))
        assert seen(r)["x-subject"] == "alice"  # the claims, for the later actions
        assert seen(ask(token(EC_KEY, "ec-1", "ES256", sub="bob")))["x-subject"] == "bob"
        now = int(time.time())
        bad = {
            "no token": None,
            "another issuer": token(iss="https://evil.example.com/"),
            "the issuer without its slash": token(iss=ISSUER.rstrip("/")),
            "another audience": token(aud="urn:other"),
            "expired": token(exp=now - 3600),
            "no expiry": token(exp=None),
            "not yet valid": token(nbf=now + 3600),
            "signed by a key not published under its kid": token(OTHER, "rsa-1"),
            "an algorithm not allowed": token(alg="RS512"),
            "a shared secret": jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "exp": now + 60},
                                          "a shared secret of 32 bytes or more",
                                          algorithm="HS256",
                                          headers={"kid": "rsa-1"}),
            "no signature": jwt.encode({"iss": ISSUER, "aud": AUDIENCE, "exp": now + 60},
                                       "", algorithm="none"),
            "not a token": "hello",
        }
        for why, raw in bad.items():
            r = ask(raw)
            assert r.status_code == 401, why
            assert r.headers["www-authenticate"] == 'Bearer error="invalid_token"', why
        r = web.get(f"{site}/headers?api", headers={"Authorization": f"Basic {token()}"})
        assert r.status_code == 401  # (the prefix is part of the rule)
        assert seen(web.get(f"{site}/headers"))  # the rule's expressions did not match


def test_a_token_in_the_body_and_the_body_still_arrives(srv: Server, site: str,
                                                        keys: Keys) -> None:
    keys.publish(("rsa-1", RSA_KEY), ("ec-1", EC_KEY))
    with EdgeClient(srv) as web:
        body = json.dumps({"id_token": token(EC_KEY, "ec-1", "ES256", aud=None),
                           "pad": "x" * 50_000}).encode()
        r = web.request("POST", f"{site}/headers?form", content=body,
                     headers={"Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        assert r.json()["sha256"] == hashlib.sha256(body).hexdigest()
        form = f"id_token={token(EC_KEY, 'ec-1', 'ES256', aud=None)}&a=1".encode()
        r = web.request("POST", f"{site}/headers?form", content=form,
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert r.status_code == 200 and r.json()["body"] == len(form)
        for content, kind in ((b'{"id_token": 5}', "application/json"),
                              (b"id_token=x", "application/x-www-form-urlencoded"),
                              (body, "text/plain")):
            r = web.request("POST", f"{site}/headers?form", content=content,
                            headers={"Content-Type": kind})
            assert r.status_code == 401, kind
        assert web.get(f"{site}/headers?form").status_code == 401  # (no body: no token)


def test_rotated_keys_are_fetched_once_and_unknown_kids_do_not_hammer_the_jwks(
        srv: Server, site: str, keys: Keys) -> None:
    keys.publish(("rsa-1", RSA_KEY))
    with EdgeClient(srv) as web:
        def ask(raw: str) -> int:
            return web.get(f"{site}/headers?api",
                           headers={"Authorization": f"Bearer {raw}"}).status_code

        assert ask(token()) == 200
        keys.publish(("rsa-1", RSA_KEY), ("rsa-2", OTHER))  # the provider rotates
        before = keys.fetches
        assert ask(token(OTHER, "rsa-2")) == 200  # an unknown kid: fetched again
        assert keys.fetches == before + 1
        for n in range(20):  # kids no key set has: no fetch for each (one in RETRY seconds)
            assert ask(token(OTHER, f"made-up-{n}")) == 401
        assert keys.fetches <= before + 2


def test_a_jwks_that_cannot_be_fetched_lets_no_one_through() -> None:
    import asyncio

    async def main() -> None:
        k = Keys()
        k.down = True
        try:
            compiled = tp.compile({"value": policy(k.url)}, "r")
            assert isinstance(compiled, tp.Policy)
            keysets = KeySets()
            validator = compiled.phases["on_http_request"][0].actions[0]
            validator = dataclasses.replace(validator, keys=keysets)
            try:
                await validator.verify(token())
                raise AssertionError("verified without keys")
            except Exception as exc:
                assert "cannot be fetched" in str(exc)
            fetched = k.fetches
            for _ in range(5):  # (not asked again at once)
                try:
                    await validator.verify(token())
                except Exception as exc:
                    assert "cannot be fetched" in str(exc)
            assert k.fetches == fetched
        finally:
            k.close()
    asyncio.run(main())


@pytest.mark.parametrize(("config", "said"), [
    ({}, "issuer.allow_list"),
    ({"issuer": {"allow_list": [{"value": ISSUER}]}}, "jws.allowed_algorithms"),
    ({"issuer": {"allow_list": [{"value": ISSUER}]}, "audience": {"allow_list": []},
      "jws": {"allowed_algorithms": ["RS256"]}}, "audience.allow_list"),
    ({"issuer": {"allow_list": [{"value": ISSUER}]},
      "jws": {"allowed_algorithms": ["HS256"]}}, "jws.allowed_algorithms"),
    ({"issuer": {"allow_list": [{"value": ISSUER}]},
      "jws": {"allowed_algorithms": ["RS256"]}}, "additional_jkus"),
    ({"issuer": {"allow_list": [{"value": ISSUER}]},
      "jws": {"allowed_algorithms": ["RS256"],
              "keys": {"sources": {"additional_jkus": ["http://keys.example.com/j"]}}}},
     "http:// only on a loopback address"),
    ({"issuer": {"allow_list": [{"value": ISSUER}]},
      "jws": {"allowed_algorithms": ["RS256"],
              "keys": {"sources": {"additional_jkus": ["https://keys.example.com/j"]}}}},
     "http.tokens"),
])
def test_jwt_validation_configurations_it_cannot_honour_are_refused(config: dict[str, Any],
                                                                    said: str) -> None:
    compiled = tp.compile({"value": json.dumps({"on_http_request": [{"actions": [
        {"type": "jwt-validation", "config": config}]}]})}, "r")
    assert isinstance(compiled, Unenforced) and said in compiled.what


def test_verify_webhook_enforced_and_soft(srv: Server, site: str) -> None:
    body = b'{"zen": "design for failure"}'
    sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    with EdgeClient(srv) as web:
        r = web.request("POST", f"{site}/headers?hook", content=body,
                     headers={"X-Hub-Signature-256": sig})
        assert r.status_code == 200 and r.json()["sha256"] == hashlib.sha256(body).hexdigest()
        for headers in ({}, {"X-Hub-Signature-256": "sha256=" + "0" * 64}):
            r = web.request("POST", f"{site}/headers?hook", content=body, headers=headers)
            assert r.status_code == 403 and r.headers["edgeway-error-code"] == \
                "ERR_EDGEWAY_3204"
        r = web.request("POST", f"{site}/headers?hook", content=body + b" ",
                     headers={"X-Hub-Signature-256": sig})
        assert r.status_code == 403  # a byte more than was signed
        soft = f"{site}/headers?soft"
        assert seen(web.request("POST", soft, content=body))["x-verified"] == "false"
        assert seen(web.request("POST", soft, content=body,
                                headers={"X-Hub-Signature-256": sig}))["x-verified"] == "true"
    for cfg, said in (({"provider": "airship", "secret": "x"}, "provider 'airship'"),
                      ({"provider": "github"}, "needs the provider's secret"),
                      ({"provider": "github", "secret": "x", "enforce": "no"}, "enforce")):
        compiled = tp.compile({"value": json.dumps({"on_http_request": [{"actions": [
            {"type": "verify-webhook", "config": cfg}]}]})}, "r")
        assert isinstance(compiled, Unenforced) and said in compiled.what


class _Failing(StubHandler):
    def do_GET(self) -> None:
        self.send(500, {}, b"broken")


def test_the_circuit_breaker_action_trips_on_failures_and_only_where_its_rule_matches(
        srv: Server) -> None:
    host = "breaker-policy.example.com"
    breaker = {"type": "circuit-breaker", "config": {
        "error_threshold": 0.5, "volume_threshold": 4, "window_duration": "10s",
        "tripped_duration": "30s"}}
    with srv.client() as api, serving(_Failing) as httpd:
        made(api, "/reserved_domains", {"domain": host})
        edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
        down = made(api, "/backends/static",
                    {"address": f"127.0.0.1:{httpd.server_address[1]}"})
        route(api, edge["id"], "path_prefix", "/", down["id"], traffic_policy={
            "value": json.dumps({"on_http_request": [
                {"expressions": ["req.url.path.startsWith('/guarded')"],
                 "actions": [breaker]}]})})
        with EdgeClient(srv) as web:
            statuses = [web.get(f"https://{host}/guarded").status_code for _ in range(4)]
            assert statuses == [500] * 4  # the upstream fails: counted
            r = web.get(f"https://{host}/guarded")
            assert r.status_code == 503
            assert r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4011"
            assert r.headers["retry-after"] == "30"
            assert web.get(f"https://{host}/other").status_code == 500  # not behind it
    for cfg, said in (({"error_threshold": 2}, "error_threshold"),
                      ({"num_buckets": 500}, "num_buckets"),
                      ({"tripped_duration": "soon"}, "tripped_duration")):
        compiled = tp.compile({"value": json.dumps({"on_http_request": [{"actions": [
            {"type": "circuit-breaker", "config": cfg}]}]})}, "r")
        assert isinstance(compiled, Unenforced) and said in compiled.what
