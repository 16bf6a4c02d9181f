"""Event destinations and subscriptions, with the sources sub-collection."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import pytest

from edgeway.pki import seal
from tests.pki.material import stored_doc
from tests.server import Server

ROLE = {"role": {"role_arn": "arn:aws:iam::123456789012:role/edgeway"}}
CREDS = {"creds": {"access_key_id": "AKIA", "secret_access_key": "s3cr3t"}}


def dest(api: httpx.Client, target: dict[str, Any], **extra: Any) -> httpx.Response:
    return api.post("/event_destinations", json={"target": target, **extra})


def test_every_target_kind(api: httpx.Client) -> None:
    targets = {
        "delivery_stream": {"auth": ROLE, "delivery_stream_arn":
                            "arn:aws:firehose:us-east-1:123456789012:deliverystream/edge"},
        "data_stream": {"auth": CREDS,
                        "stream_arn": "arn:aws:kinesis:eu-west-1:123456789012:stream/edge"},
        "log_group": {"auth": ROLE,
                      "log_group_arn": "arn:aws:logs:us-east-1:123456789012:log-group:edge"},
        "monitoring": {"api_key": "k", "tags": "env:prod", "service": "edge",
                       "site": "datadoghq.eu"},
        "cloud_logs_ingestion": {
            "tenant_id": "t", "client_id": "c", "client_secret": "s",
            "logs_ingestion_uri": "https://dce.example.com", "data_collection_rule_id": "dcr",
            "data_collection_stream_name": "Custom-Edge_CL"},
    }
    for name, target in targets.items():
        assert isinstance(target, dict)
        r = dest(api, {name: target})
        assert r.status_code == 201, (name, r.text)
        body = r.json()
        assert body["format"] == "json"
        assert set(body["target"]) == set(targets)
        assert [k for k, v in body["target"].items() if v is not None] == [name]
        if "auth" in target:
            assert set(body["target"][name]["auth"]) == {"role", "creds"}


@pytest.mark.parametrize(("target", "member", "suffix"), [
    ({}, "target", "_236"),
    ({"monitoring": {"api_key": "k"}, "data_stream": {"auth": ROLE, "stream_arn": "x"}},
     "target", "_236"),
    ({"data_stream": {"auth": {}, "stream_arn":
                      "arn:aws:kinesis:us-east-1:123456789012:stream/a"}},
     "target.data_stream.auth", "_240"),
    ({"data_stream": {"auth": {**ROLE, **CREDS}, "stream_arn":
                      "arn:aws:kinesis:us-east-1:123456789012:stream/a"}},
     "target.data_stream.auth", "_240"),
    ({"data_stream": {"auth": ROLE, "stream_arn": "not-an-arn"}},
     "target.data_stream.stream_arn", "_236"),
    ({"log_group": {"auth": ROLE, "log_group_arn":
                    "arn:aws:kinesis:us-east-1:123456789012:stream/a"}},
     "target.log_group.log_group_arn", "_236"),
    ({"data_stream": {"auth": {"role": {"role_arn": "arn:aws:s3:::bucket"}},
                      "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/a"}},
     "target.data_stream.auth.role.role_arn", "_236"),
    ({"monitoring": {"api_key": " "}}, "target.monitoring.api_key", "_236"),
    ({"monitoring": {"apikey": "k"}}, "target.monitoring.apikey", "_214"),
    ({"cloud_logs_ingestion": {
        "tenant_id": "t", "client_id": "c", "client_secret": "s",
        "logs_ingestion_uri": "http://plain.example.com", "data_collection_rule_id": "d",
        "data_collection_stream_name": "s"}},
     "target.cloud_logs_ingestion.logs_ingestion_uri", "_236"),
])
def test_bad_targets(api: httpx.Client, target: dict[str, Any], member: str,
                     suffix: str) -> None:
    r = dest(api, target)
    assert r.status_code == 400, r.text
    assert member in r.json()["msg"] and r.json()["error_code"].endswith(suffix)


@pytest.mark.parametrize(("wrong", "form", "right"), [
    ("arn:aws:iam:us-east-1:123456789012:role/edgeway",
     "arn:aws:iam::<12-digit account id>:role/<name>", "arn:aws:iam::123456789012:role/edgeway"),
    ("arn:aws:iam::1234:role/edgeway",
     "arn:aws:iam::<12-digit account id>:role/<name>", "arn:aws-cn:iam::123456789012:role/a/b"),
])
def test_the_arn_message_states_the_rule_it_applies(api: httpx.Client, wrong: str, form: str,
                                                    right: str) -> None:
    def target(arn: str) -> dict[str, Any]:
        return {"data_stream": {"auth": {"role": {"role_arn": arn}},
                                "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/a"}}
    r = dest(api, target(wrong))
    assert r.status_code == 400 and form in r.json()["msg"], r.text
    assert dest(api, target(right)).status_code == 201


SECRET_TARGETS = {
    "data_stream": ({"auth": CREDS, "stream_arn":
                     "arn:aws:kinesis:eu-west-1:123456789012:stream/edge"},
                    ("auth", "creds", "secret_access_key"), "s3cr3t"),
    "monitoring": ({"api_key": "dd-key-1"}, ("api_key",), "dd-key-1"),
    "cloud_logs_ingestion": ({"tenant_id": "t", "client_id": "c", "client_secret": "az-sec",
                              "logs_ingestion_uri": "https://dce.example.com",
                              "data_collection_rule_id": "dcr",
                              "data_collection_stream_name": "Custom-Edge_CL"},
                             ("client_secret",), "az-sec"),
}


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


@pytest.mark.parametrize("name", SECRET_TARGETS)
def test_secrets_are_sealed_and_never_returned(api: httpx.Client, server: Server,
                                               name: str) -> None:
    target, path, secret = SECRET_TARGETS[name]
    made = dest(api, {name: target}).json()
    url = f"/event_destinations/{made['id']}"
    listed = api.get("/event_destinations", params={"limit": "100"}).json()
    for shown in (made, api.get(url).json(), *[d for d in listed["event_destinations"]
                                               if d["id"] == made["id"]]):
        assert _at(shown["target"][name], path) == "********", shown
        assert secret not in str(shown)
    box = seal.load(server.data_dir)
    stored = _at(stored_doc(server, "event_destinations", made["id"])["target"][name], path)
    assert stored.startswith("v1:") and box.open(stored, "event destination secret") \
        == secret.encode()
    # the mask written back keeps the secret; a new secret replaces it
    patched = api.patch(url, json={"target": made["target"], "description": "x"})
    assert patched.status_code == 200, patched.text
    stored = _at(stored_doc(server, "event_destinations", made["id"])["target"][name], path)
    assert box.open(stored, "event destination secret") == secret.encode()
    changed = {name: copy.deepcopy(made["target"][name])}
    holder = _at(changed[name], path[:-1])
    holder[path[-1]] = "rotated"
    assert api.patch(url, json={"target": changed}).status_code == 200
    stored = _at(stored_doc(server, "event_destinations", made["id"])["target"][name], path)
    assert box.open(stored, "event destination secret") == b"rotated"
    # the mask with nothing stored behind it is refused, naming the member
    r = dest(api, {name: made["target"][name]})
    assert r.status_code == 400 and f"target.{name}.{'.'.join(path)}" in r.json()["msg"]


def test_format_and_required_target(api: httpx.Client) -> None:
    ok = {"monitoring": {"api_key": "k"}}
    r = dest(api, ok, format="xml")
    assert r.status_code == 400 and "format" in r.json()["msg"]
    assert api.post("/event_destinations", json={"format": "json"}).status_code == 400
    d = dest(api, ok).json()
    r = api.patch(f"/event_destinations/{d['id']}", json={"target": {"monitoring": None}})
    assert r.status_code == 400
    r = api.patch(f"/event_destinations/{d['id']}", json={"description": "x"})
    assert r.json()["target"]["monitoring"]["api_key"] == "********"


def test_subscriptions_and_sources(api: httpx.Client, ) -> None:
    d = dest(api, {"monitoring": {"api_key": "k"}}).json()
    r = api.post("/event_subscriptions", json={"sources": [{"type": "ip_policy_created.v0"}],
                                               "destination_ids": [d["id"]]})
    assert r.status_code == 201, r.text
    sub = r.json()
    base = sub["uri"]
    assert sub["sources"] == [{"type": "ip_policy_created.v0",
                               "uri": f"{base}/sources/ip_policy_created.v0",
                               "filter": "", "fields": []}]
    assert sub["destinations"] == [{"id": d["id"], "uri": d["uri"]}]
    r = api.post(f"/event_subscriptions/{sub['id']}/sources", json={"type": "bogus.v0"})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_238")
    r = api.post(f"/event_subscriptions/{sub['id']}/sources",
                 json={"type": "http_request_complete.v0"})
    assert r.status_code == 201
    assert r.json()["uri"] == f"{base}/sources/http_request_complete.v0"
    dup = api.post(f"/event_subscriptions/{sub['id']}/sources",
                   json={"type": "http_request_complete.v0"})
    assert dup.status_code == 400
    listed = api.get(f"/event_subscriptions/{sub['id']}/sources").json()
    assert [s["type"] for s in listed["sources"]] == ["ip_policy_created.v0",
                                                      "http_request_complete.v0"]
    assert listed["uri"] == f"{base}/sources"
    one = f"/event_subscriptions/{sub['id']}/sources/http_request_complete.v0"
    assert api.get(one).status_code == 200
    assert api.patch(one, json={}).status_code == 200
    assert api.patch(one, json={"type": "x"}).status_code == 400
    r = api.patch(one, json={"fields": ["http.response", "conn.client_ip"],
                             "filter": "http.response.status_code >= 500"})
    assert r.status_code == 200, r.text
    assert r.json()["fields"] == ["http.response", "conn.client_ip"]
    assert api.get(one).json()["filter"] == "http.response.status_code >= 500"
    assert api.delete(one).status_code == 204
    assert api.get(one).status_code == 404
    assert api.delete(one).status_code == 404
    assert len(api.get(f"/event_subscriptions/{sub['id']}").json()["sources"]) == 1


@pytest.mark.parametrize(("source", "member", "says"), [
    ({"type": "http_request_complete.v0", "fields": ["http.nope"]}, "sources[0].fields[0]",
     "not a field of http_request_complete.v0"),
    ({"type": "ip_policy_created.v0", "fields": ["obj.id"]}, "sources[0].fields",
     "only traffic events"),
    ({"type": "tcp_connection_closed.v0", "filter": "conn.bytes_in >"}, "sources[0].filter",
     "not a valid CEL expression"),
    ({"type": "tcp_connection_closed.v0", "filter": "http.request.method == 'GET'"},
     "sources[0].filter", "names http"),
    ({"type": "api_key_created.v0", "filter": "conn.client_ip == ''"}, "sources[0].filter",
     "sees actor, obj"),
])
def test_source_fields_and_filters_are_checked(api: httpx.Client, source: dict[str, Any],
                                               member: str, says: str) -> None:
    r = api.post("/event_subscriptions", json={"sources": [source]})
    assert r.status_code == 400, r.text
    assert f"'{member}'" in r.json()["msg"] and says in r.json()["msg"], r.text
    sub = api.post("/event_subscriptions", json={}).json()
    r = api.post(f"/event_subscriptions/{sub['id']}/sources", json=source)
    assert r.status_code == 400 and f"'{member.removeprefix('sources[0].')}'" in \
        r.json()["msg"], r.text


def test_subscription_rules(api: httpx.Client) -> None:
    r = api.post("/event_subscriptions", json={"sources": [{"type": "nope.v0"}]})
    assert r.status_code == 400 and "sources[0].type" in r.json()["msg"]
    r = api.post("/event_subscriptions", json={"sources": [{"type": "domain_created.v0"}] * 2})
    assert r.status_code == 400 and "twice" in r.json()["msg"]
    r = api.post("/event_subscriptions", json={"destination_ids": ["ed_" + "0" * 27]})
    assert r.status_code == 400 and "destination_ids[0]" in r.json()["msg"]


def test_a_destination_in_use_cannot_be_deleted(api: httpx.Client) -> None:
    d = dest(api, {"monitoring": {"api_key": "k"}}).json()
    sub = api.post("/event_subscriptions", json={"destination_ids": [d["id"]]}).json()
    r = api.delete(f"/event_destinations/{d['id']}")
    assert r.status_code == 400 and sub["id"] in r.json()["msg"]
    assert api.get(f"/event_destinations/{d['id']}").status_code == 200
    api.patch(f"/event_subscriptions/{sub['id']}", json={"destination_ids": []})
    assert api.delete(f"/event_destinations/{d['id']}").status_code == 204
