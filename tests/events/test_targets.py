"""The AWS targets against moto_server (records read back from Firehose's S3 objects, the
Kinesis stream and the CloudWatch log stream Edgeway creates), with static credentials and
with a role assumed through STS; Azure Monitor Logs Ingestion against the HTTPS stand-in
(token, then upload, as Azure documents them)."""

from __future__ import annotations

import asyncio
import json
import secrets
from typing import Any

import boto3
import httpx
import pytest

from edgeway.config import EventsConfig
from edgeway.events import envelope
from edgeway.events.destinations import SLICE
from edgeway.events.destinations.azure import AzureLogs
from edgeway.events.destinations.datadog import Datadog
from edgeway.events.targets import Clients
from tests.events.capture import AZ_CLIENT, AZ_SECRET, AZ_TENANT, DD_KEY, Capture
from tests.events.conftest import AWS_ENV, delivery, made, subscribed, wait_for, wait_len

ACCOUNT = "123456789012"
CREDS = {"creds": {"access_key_id": "AKIAEDGEWAYTEST", "secret_access_key": "not-checked"}}
AZURE_PATH = "/dataCollectionRules/dcr-00112233445566778899aabbccddeeff/streams/" \
             "Custom-EdgewayEvents_CL"
ROLE = {"role": {"role_arn": f"arn:aws:iam::{ACCOUNT}:role/edgeway-events"}}


def aws(moto: str, service: str) -> Any:
    return boto3.client(service, endpoint_url=moto, region_name="us-east-1",
                        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"])


def policies(api: httpx.Client, n: int) -> list[dict[str, Any]]:
    return [made(api, "/ip_policies", {"description": f"p{i}"}) for i in range(n)]


def firehose_lines(moto: str, bucket: str) -> list[dict[str, Any]]:
    s3 = aws(moto, "s3")
    out = []
    for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
        body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode()
        out += [json.loads(line) for line in body.splitlines() if line]
    return out


def test_firehose_with_static_credentials(api: httpx.Client, moto: str) -> None:
    name = f"edge-{secrets.token_hex(4)}"
    aws(moto, "s3").create_bucket(Bucket=name)
    aws(moto, "firehose").create_delivery_stream(
        DeliveryStreamName=name, DeliveryStreamType="DirectPut",
        ExtendedS3DestinationConfiguration={
            "RoleARN": f"arn:aws:iam::{ACCOUNT}:role/firehose",
            "BucketARN": f"arn:aws:s3:::{name}", "Prefix": "fh/"})
    arn = f"arn:aws:firehose:us-east-1:{ACCOUNT}:deliverystream/{name}"
    with subscribed(api, {"delivery_stream": {"auth": CREDS, "delivery_stream_arn": arn}},
                    [{"type": "ip_policy_created.v0"}]):
        made_ = policies(api, 3)
        got = wait_len("records in S3", lambda: firehose_lines(moto, name), 3)
    # (Firehose writes an object per delivery; their keys do not sort by time)
    assert sorted(e["object"]["id"] for e in got) == sorted(p["id"] for p in made_)
    assert {e["event_type"] for e in got} == {"ip_policy_created.v0"}


def test_kinesis_with_an_assumed_role(api: httpx.Client, moto: str) -> None:
    name = f"edge-{secrets.token_hex(4)}"
    kinesis = aws(moto, "kinesis")
    kinesis.create_stream(StreamName=name, ShardCount=1)
    arn = f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/{name}"
    with subscribed(api, {"data_stream": {"auth": ROLE, "stream_arn": arn}},
                    [{"type": "ip_policy_created.v0"}]) as dest:
        made_ = policies(api, 3)
        wait_for("delivery", lambda: delivery(api, dest["id"])["delivered"] >= 3)
    shard = kinesis.describe_stream(StreamName=name)["StreamDescription"]["Shards"][0]
    it = kinesis.get_shard_iterator(StreamName=name, ShardId=shard["ShardId"],
                                    ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    records = kinesis.get_records(ShardIterator=it)["Records"]
    got = [json.loads(r["Data"]) for r in records]
    assert [e["object"]["id"] for e in got] == [p["id"] for p in made_]
    assert [r["PartitionKey"] for r in records] == [e["event_id"] for e in got]


def test_cloudwatch_logs_creates_its_stream(api: httpx.Client, moto: str) -> None:
    group = f"edge-{secrets.token_hex(4)}"
    logs = aws(moto, "logs")
    logs.create_log_group(logGroupName=group)
    arn = f"arn:aws:logs:us-east-1:{ACCOUNT}:log-group:{group}"
    with subscribed(api, {"log_group": {"auth": CREDS, "log_group_arn": arn}},
                    [{"type": "ip_policy_created.v0"}, {"type": "ip_policy_deleted.v0"}]):
        made_ = policies(api, 2)
        api.delete(f"/ip_policies/{made_[0]['id']}")

        def events() -> list[dict[str, Any]]:
            try:
                out: list[dict[str, Any]] = logs.get_log_events(
                    logGroupName=group, logStreamName="edgeway-events",
                    startFromHead=True)["events"]
                return out
            except logs.exceptions.ResourceNotFoundException:
                return []
        got = wait_len("log events", events, 3)
    bodies = [json.loads(e["message"]) for e in got]
    assert [(b["event_type"], b["object"]["id"]) for b in bodies] == [
        ("ip_policy_created.v0", made_[0]["id"]), ("ip_policy_created.v0", made_[1]["id"]),
        ("ip_policy_deleted.v0", made_[0]["id"])]
    stamps = [e["timestamp"] for e in got]
    assert stamps == sorted(stamps)


def test_a_missing_stream_is_a_permanent_failure_then_dead_letters_sent_again(
        api: httpx.Client, moto: str) -> None:
    name = f"edge-{secrets.token_hex(4)}"
    arn = f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/{name}"
    with subscribed(api, {"data_stream": {"auth": CREDS, "stream_arn": arn}},
                    [{"type": "ip_policy_created.v0"}]) as dest:
        checked = api.post(f"/event_destinations/{dest['id']}/verify").json()
        assert checked["delivered"] is False and checked["permanent"] is True
        assert "ResourceNotFoundException" in checked["answer"], checked
        made_ = policies(api, 2)
        state = wait_for("dead letters", lambda: d if (d := delivery(api, dest["id"]))
                         ["dead_letters"] >= 2 else None)
        assert "ResourceNotFoundException" in state["last_error"] and state["backlog"] == 0
        dead = api.get(f"/event_destinations/{dest['id']}/dead_letters").json()
        assert [d["event"]["object"]["id"] for d in dead["dead_letters"]] == \
            [p["id"] for p in reversed(made_)]  # newest first
        assert all(d["attempts"] == 4 for d in dead["dead_letters"])
        kinesis = aws(moto, "kinesis")
        kinesis.create_stream(StreamName=name, ShardCount=1)
        r = api.post(f"/event_destinations/{dest['id']}/dead_letters/resend", json={})
        assert r.status_code == 200 and r.json() == {"resent": 2}
        wait_for("delivery", lambda: delivery(api, dest["id"])["delivered"] >= 2)
        assert api.get(f"/event_destinations/{dest['id']}/dead_letters").json()[
            "dead_letters"] == []
    shard = kinesis.describe_stream(StreamName=name)["StreamDescription"]["Shards"][0]
    it = kinesis.get_shard_iterator(StreamName=name, ShardId=shard["ShardId"],
                                    ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    got = [json.loads(r["Data"]) for r in kinesis.get_records(ShardIterator=it)["Records"]]
    assert [e["object"]["id"] for e in got] == [p["id"] for p in made_]


def azure(secret: str = AZ_SECRET) -> dict[str, Any]:
    return {"cloud_logs_ingestion": {
        "tenant_id": AZ_TENANT, "client_id": AZ_CLIENT, "client_secret": secret,
        "logs_ingestion_uri": "https://edge-dce.westeurope-1.ingest.monitor.azure.com",
        "data_collection_rule_id": "dcr-00112233445566778899aabbccddeeff",
        "data_collection_stream_name": "Custom-EdgewayEvents_CL"}}


def test_azure_logs_ingestion_token_then_upload(api: httpx.Client, cap: Capture) -> None:
    path = AZURE_PATH
    before = len(cap.of(path, 204))
    tokens = len(cap.of(f"/{AZ_TENANT}/oauth2/v2.0/token", 200))
    with subscribed(api, azure(), [{"type": "ip_policy_created.v0"}]) as dest:
        first = policies(api, 1)
        wait_len("an upload", lambda: cap.of(path, 204)[before:], 1)
        second = policies(api, 1)
        uploads = wait_len("two uploads", lambda: cap.of(path, 204)[before:], 2)
        assert delivery(api, dest["id"])["last_error"] == ""
    records = [rec for up in uploads for rec in up.json()]
    assert [r["object"]["id"] for r in records] == [first[0]["id"], second[0]["id"]]
    for r in records:
        assert r["TimeGenerated"] == r["event_timestamp"]
        assert set(r) == {"TimeGenerated", "event_id", "event_type", "event_timestamp",
                          "actor", "object"}
    for up in uploads:
        assert up.query["api-version"] == ["2023-01-01"]
        assert up.headers["content-encoding"] == "gzip"
        assert up.headers["authorization"].removeprefix("Bearer ") in cap.tokens
    # one token for both uploads (kept until shortly before it expires)
    assert len(cap.of(f"/{AZ_TENANT}/oauth2/v2.0/token", 200)) - tokens == 1


@pytest.mark.parametrize("secret", ["wrong-secret"])
def test_azure_refused_credentials_show_on_the_destination(api: httpx.Client, cap: Capture,
                                                           secret: str) -> None:
    with subscribed(api, azure(secret), [{"type": "ip_policy_created.v0"}]) as dest:
        checked = api.post(f"/event_destinations/{dest['id']}/verify").json()
        assert checked["delivered"] is False and checked["permanent"] is True
        assert "401" in checked["answer"]
        policies(api, 1)
        state = wait_for("the error", lambda: d if (d := delivery(api, dest["id"]))
                         ["last_error"] else None)
        assert "refused the client credentials" in state["last_error"]
        assert state["backlog"] + state["dead_letters"] == 1


@pytest.mark.parametrize("kind", ["datadog", "azure"])
@pytest.mark.parametrize("mixed", [False, True], ids=["one-type", "mixed"])
def test_a_batch_of_many_slices_arrives_whole(cap: Capture, kind: str, mixed: bool) -> None:
    """A batch is written and compressed a slice at a time: every event arrives once, in
    order, in one request, whether the events are of one type or several."""
    tags = f"run:{secrets.token_hex(4)}"
    clients = Clients(EventsConfig(datadog_url=cap.url, azure_login_url=cap.url,
                                   azure_ingestion_url=cap.url, ca_file=cap.ca_file), "node-1")
    target: Datadog | AzureLogs = \
        Datadog({"api_key": DD_KEY, "tags": tags}, lambda s: s, clients) if kind == "datadog" \
        else AzureLogs(azure()["cloud_logs_ingestion"], lambda s: s, clients)
    types = ["http_request_complete.v0", "tcp_connection_closed.v0"] if mixed else \
        ["http_request_complete.v0"]
    events = [envelope.encode(envelope.event(types[i % len(types)], {"n": i, "q": '"\\'}))
              for i in range(SLICE * 2 + 7)]
    sent = [json.loads(e) for e in events]
    before = len(cap.of(AZURE_PATH, 204))
    try:
        asyncio.run(target.send(events))
    finally:
        asyncio.run(clients.close())
    if kind == "datadog":
        got = wait_len("the batch", lambda: [r for r in cap.of("/api/v2/logs", 202)
                                             if r.json()[0]["ddtags"] == tags], 1)
        assert len(got) == 1
        entries = got[0].json()
        assert [e["event"] for e in entries] == sent
        assert [e["message"] for e in entries] == [e["event_type"] for e in sent]
        assert {e["hostname"] for e in entries} == {"node-1"}
    else:
        got = wait_len("the upload", lambda: cap.of(AZURE_PATH, 204)[before:], 1)
        assert len(got) == 1
        assert got[0].json() == [{"TimeGenerated": e["event_timestamp"], **e} for e in sent]
