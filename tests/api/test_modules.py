"""Module rules: each bad input gets a 400 naming the member and the rule."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from cryptography import x509

from tests.api.samples import created
from tests.api.samples_edges import reserved
from tests.certs import make_cert

IDP_METADATA = """<?xml version="1.0"?>
<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata"
    entityID="https://idp.example.com/metadata">
  <md:IDPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">
    <md:KeyDescriptor use="signing">
      <ds:KeyInfo xmlns:ds="http://www.w3.org/2000/09/xmldsig#"><ds:X509Data>
        <ds:X509Certificate>{cert}</ds:X509Certificate>
      </ds:X509Data></ds:KeyInfo>
    </md:KeyDescriptor>
    <md:SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect"
        Location="https://idp.example.com/sso"/>
  </md:IDPSSODescriptor>
</md:EntityDescriptor>""".replace("{cert}", "".join(
    make_cert().splitlines()[1:-1]))


@pytest.fixture
def route_url(api: httpx.Client) -> str:
    edge = created(api, "/edges/https", {"hostports": [f"{reserved(api)}:443"]})
    rt = created(api, f"/edges/https/{edge['id']}/routes",
                 {"match_type": "path_prefix", "match": "/"})
    return f"/edges/https/{edge['id']}/routes/{rt['id']}"


def refused(api: httpx.Client, url: str, body: Any, member: str, suffix: str = "") -> None:
    r = api.put(url, json=body)
    assert r.status_code == 400, (body, r.text)
    assert member in r.json()["msg"], r.json()["msg"]
    assert r.json()["error_code"].endswith(suffix)


@pytest.mark.parametrize(("body", "member"), [
    ({"num_buckets": 0}, "num_buckets"), ({"num_buckets": 129}, "num_buckets"),
    ({"error_threshold_percentage": 1.5}, "error_threshold_percentage"),
    ({"error_threshold_percentage": -0.1}, "error_threshold_percentage"),
    ({"tripped_duration": -1}, "tripped_duration"), ({"rolling_window": 2**32}, "rolling"),
    ({"volume_threshold": "ten"}, "volume_threshold"),
])
def test_circuit_breaker_ranges(api: httpx.Client, route_url: str, body: Any,
                                member: str) -> None:
    refused(api, route_url + "/circuit_breaker", body, member)


def test_circuit_breaker_defaults(api: httpx.Client, route_url: str) -> None:
    r = api.put(route_url + "/circuit_breaker", json={"num_buckets": 128})
    assert r.json() == {"enabled": True, "tripped_duration": 10, "rolling_window": 10,
                        "num_buckets": 128, "volume_threshold": 20,
                        "error_threshold_percentage": 0.5}


def test_tls_termination(api: httpx.Client) -> None:
    tls = created(api, "/edges/tls", {})
    url = f"/edges/tls/{tls['id']}/tls_termination"
    refused(api, url, {"terminate_at": "upstream", "min_version": "1.2"}, "min_version")
    refused(api, url, {"min_version": "1.4"}, "min_version", "_219")
    refused(api, url, {"terminate_at": "agentless"}, "terminate_at")
    assert api.put(url, json={"terminate_at": "upstream"}).json() == {
        "enabled": True, "terminate_at": "upstream", "min_version": None}
    ca = created(api, "/certificate_authorities",
                 {"ca_pem": __import__("tests.certs").certs.make_cert()})["id"]
    refused(api, f"/edges/tls/{tls['id']}/mutual_tls",
            {"certificate_authority_ids": [ca]}, "mutual_tls")
    edge = created(api, "/edges/https", {})
    refused(api, f"/edges/https/{edge['id']}/tls_termination", {"terminate_at": "edge"},
            "terminate_at", "_214")
    r = api.put(f"/edges/https/{edge['id']}/tls_termination", json={"min_version": "1.3"})
    assert r.json() == {"enabled": True, "terminate_at": "edge", "min_version": "1.3"}


@pytest.mark.parametrize(("provider", "member", "suffix"), [
    ({}, "oauth.provider", "_7037"),
    ({"code_host_a": {}, "search_a": {}}, "oauth.provider", "_7036"),
    ({"search_a": {"client_id": "x"}}, "search_a.client_secret", ""),
    ({"search_a": {"client_secret": "x"}}, "search_a.client_id", ""),
    ({"search_a": {"scopes": ["email"]}}, "search_a.scopes", "_390"),
    ({"search_a": {}}, "search_a.client_id", "_7035"),  # no managed application here
    ({"code_host_a": {"teams": ["justateam"]}}, "code_host_a.teams[0]", ""),
    ({"search_a": {"teams": ["a/b"]}}, "search_a.teams", "_214"),
])
def test_oauth_rules(api: httpx.Client, route_url: str, provider: Any, member: str,
                     suffix: str) -> None:
    refused(api, route_url + "/oauth", {"provider": provider}, member, suffix)


def test_oauth_echoes_every_member(api: httpx.Client, route_url: str) -> None:
    body = {"provider": {"code_host_a": {"client_id": "i", "client_secret": "s",
                                         "scopes": ["read:org"], "teams": ["acme/ops"],
                                         "organizations": ["acme"]}},
            "cookie_prefix": "acme.", "auth_check_interval": 300}
    shown = api.put(route_url + "/oauth", json=body).json()
    assert set(shown["provider"]) == {"code_host_a", "social_a", "enterprise_a", "search_a",
                                      "professional_net", "code_host_b", "streaming_a",
                                      "retail_a"}
    assert shown["provider"]["code_host_a"]["teams"] == ["acme/ops"]
    assert shown["provider"]["search_a"] is None
    assert (shown["options_passthrough"], shown["maximum_duration"]) == (False, 0)


@pytest.mark.parametrize(("body", "member", "suffix"), [
    ({"provider": "nobody", "secret": "s"}, "provider", "_7030"),
    ({"secret": "s"}, "provider", "_7029"),
    ({"provider": "stripe"}, "secret", "_7027"),
    ({"provider": "SNS", "secret": "s"}, "secret", "_7026"),  # signed by its certificate
    ({"provider": "airship", "secret": "s"}, "provider", "_7030"),  # no scheme here
])
def test_webhook_verification_rules(api: httpx.Client, route_url: str, body: Any,
                                    member: str, suffix: str) -> None:
    refused(api, route_url + "/webhook_verification", body, member, suffix)


def test_webhook_provider_case_and_sns(api: httpx.Client, route_url: str) -> None:
    url = route_url + "/webhook_verification"
    assert api.put(url, json={"provider": "ZOOM", "secret": "s"}).json()["provider"] == "zoom"
    assert api.put(url, json={"provider": "sns"}).json()["secret"] == ""


@pytest.mark.parametrize(("body", "member"), [
    ({"issuer": "not a url", "client_id": "c", "client_secret": "s"}, "issuer"),
    ({"issuer": "https://idp.example.com", "client_secret": "s"}, "client_id"),
    ({"issuer": "https://idp.example.com", "client_id": "c"}, "client_secret"),
])
def test_oidc_rules(api: httpx.Client, route_url: str, body: Any, member: str) -> None:
    refused(api, route_url + "/oidc", body, member)


@pytest.mark.parametrize(("metadata", "words"), [
    ("", "required"), ("<not xml", "well-formed"),
    ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><x/>', "DOCTYPE"),
    ("<root/>", "EntityDescriptor"),
    ('<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="x"/>',
     "IDPSSODescriptor"),
    (IDP_METADATA.replace("HTTP-Redirect", "HTTP-POST"), "HTTP-Redirect binding"),
    (IDP_METADATA.replace('use="signing"', 'use="encryption"'), "signing certificate"),
    (IDP_METADATA.replace("<ds:X509Certificate>", "<ds:X509Certificate>AAAA"),
     "not a base64 DER certificate"),
])
def test_saml_metadata_must_describe_an_idp(api: httpx.Client, route_url: str,
                                            metadata: str, words: str) -> None:
    r = api.put(route_url + "/saml", json={"idp_metadata": metadata})
    assert r.status_code == 400 and "idp_metadata" in r.json()["msg"]
    assert words in r.json()["msg"]


def test_saml_generates_the_service_provider(api: httpx.Client, route_url: str,
                                             server: Any) -> None:
    r = api.put(route_url + "/saml", json={"idp_metadata": IDP_METADATA,
                                           "nameid_format": "urn:bogus"})
    assert r.status_code == 400 and "nameid_format" in r.json()["msg"]
    shown = api.put(route_url + "/saml", json={"idp_metadata": IDP_METADATA}).json()
    rid = route_url.rsplit("/", 1)[1]
    host = api.get(route_url.rsplit("/routes", 1)[0]).json()["hostports"][0].split(":")[0]
    # the service provider lives on the route's own host, as the edge serves it
    assert shown["entity_id"] == f"https://{host}:{server.https_port}/.edgeway/saml/{rid}" \
        == shown["metadata_url"]
    assert shown["assertion_consumer_service_url"] == shown["entity_id"] + "/acs"
    assert shown["single_logout_url"] == shown["entity_id"] + "/slo"
    assert shown["nameid_format"].endswith(":persistent")
    cert = x509.load_pem_x509_certificate(shown["request_signing_certificate_pem"].encode())
    assert cert.public_key().key_size == 2048  # type: ignore[union-attr]
    assert "signing_key_sealed" not in shown
    again = api.put(route_url + "/saml", json={"idp_metadata": IDP_METADATA,
                                               "force_authn": True}).json()
    assert again["request_signing_certificate_pem"] == shown["request_signing_certificate_pem"]
    assert again["force_authn"] is True
    r = api.put(route_url + "/oidc", json={"issuer": "https://i.example.com",
                                           "client_id": "c", "client_secret": "s"})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_7079")


def test_user_agent_filter_patterns_compile(api: httpx.Client, route_url: str) -> None:
    refused(api, route_url + "/user_agent_filter", {"allow": ["ok", "(unclosed"]}, "allow[1]")
    refused(api, route_url + "/request_headers", {"add": {"Bad Header": "x"}}, "add.Bad Header")
    refused(api, route_url + "/response_headers", {"add": {"X-A": "a\r\nb"}}, "add.X-A")


@pytest.mark.parametrize(("policy", "words"), [
    ("{not: [valid", "neither JSON nor YAML"),
    ('["a"]', "phases"),
    ('{"on_tcp_connect": []}', "on_tcp_connect"),
    ('{"on_http_request": [{"name": "r1", "expressions": ["req.method =="], '
     '"actions": [{"type": "deny"}]}]}', "('r1').expressions[0]"),
    ('{"on_http_request": [{"name": "r2", "actions": [{"type": "explode"}]}]}',
     "('r2').actions[0].type"),
    ('{"on_http_response": [{"actions": [{"type": "rate-limit"}]}]}', "cannot run"),
    ('{"on_http_request": [{"actions": []}]}', "non-empty"),
    ('{"on_http_request": [{"actions": [{"type": "add-headers", "config": '
     '{"headers": {"x": "${req.method ==}"}}}]}]}', "config.headers.x"),
    ('{"on_http_request": [{"actions": [{"type": "log"}], "when": 1}]}', "rule is an object"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_traffic_policy_says_which_rule_and_why(api: httpx.Client, route_url: str,
                                                policy: str, words: str) -> None:
    r = api.put(route_url + "/traffic_policy", json={"value": policy})
    assert r.status_code == 400 and words in r.json()["msg"], r.json()["msg"]


def test_traffic_policy_accepts_json_and_yaml(api: httpx.Client, route_url: str) -> None:
    yaml_doc = ("on_http_request:\n  - name: block curl\n    expressions:\n"
                "      - \"req.headers['user-agent'].exists(v, v.startsWith('curl'))\"\n"
                "    actions:\n      - type: custom-response\n        config:\n"
                "          status_code: 403\n          content: \"${req.method} refused\"\n")
    shown = api.put(route_url + "/traffic_policy", json={"value": yaml_doc}).json()
    assert shown == {"enabled": True, "value": yaml_doc}
    tcp = created(api, "/edges/tcp", {})
    r = api.put(f"/edges/tcp/{tcp['id']}/traffic_policy",
                json={"value": '{"on_http_request": [{"actions": [{"type": "deny"}]}]}'})
    assert r.status_code == 400 and "on_tcp_connect" in r.json()["msg"]
