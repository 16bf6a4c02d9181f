"""The stream targets (Firehose, Kinesis) against a stand-in for their APIs that counts
refused records without marking any (a partial failure as a service behind
``--events-aws-endpoint-url`` may answer it; moto cannot be made to): a failure worth
retrying that says so, the batch sent again whole, delivered once the service takes it."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.events.conftest import AWS_ENV, delivery, made, subscribed, wait_for
from tests.events.test_targets import ACCOUNT, CREDS
from tests.server import Server, start

# X-Amz-Target -> (the answer's count of refused records, its list, one result)
ANSWERS = {"Kinesis_20131202.PutRecords": ("FailedRecordCount", "Records",
                                           {"SequenceNumber": "1", "ShardId": "shardId-0"}),
           "Firehose_20150804.PutRecordBatch": ("FailedPutCount", "RequestResponses",
                                                {"RecordId": "r1"})}


@dataclass
class Streams:
    url: str
    refuse: bool = True  # count every record refused, marking none
    taken: list[list[dict[str, Any]]] = field(default_factory=list)  # events, per call taken
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    streams: Streams

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        count_key, list_key, result = ANSWERS[self.headers["x-amz-target"]]
        records = body["Records"]
        with self.streams.lock:
            refused = len(records) if self.streams.refuse else 0
            if not refused:
                self.streams.taken.append([json.loads(base64.b64decode(r["Data"]))
                                           for r in records])
        data = json.dumps({count_key: refused, list_key: [result] * len(records)}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def streams() -> Iterator[Streams]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    fake = Streams(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = type("Handler", (_Handler,), {"streams": fake})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def srv(tmp_path: Path, streams: Streams) -> Iterator[Server]:
    server = start(tmp_path, None, "--events-aws-endpoint-url", streams.url,
                   "--events-retry", "0.2", "--events-attempts", "100", env=AWS_ENV)
    try:
        yield server
    finally:
        assert server.stop() == 0


def test_refused_records_unmarked_are_retried_whole(srv: Server, streams: Streams) -> None:
    kinesis = {"data_stream": {"auth": CREDS,
                               "stream_arn": f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/s"}}
    firehose = {"delivery_stream": {"auth": CREDS, "delivery_stream_arn":
                                    f"arn:aws:firehose:us-east-1:{ACCOUNT}:deliverystream/f"}}
    with srv.client() as api:
        for target, label, key in ((kinesis, "Kinesis", "FailedRecordCount"),
                                   (firehose, "Firehose", "FailedPutCount")):
            dest = made(api, "/event_destinations", {"target": target})
            checked = api.post(f"/event_destinations/{dest['id']}/verify").json()
            assert checked["delivered"] is False and checked["permanent"] is False
            assert checked["answer"] == (f"{label} refused 1 of 1 records without marking "
                                         f"which ({key} 1, no ErrorCode in its answer): all "
                                         "are sent again")
            assert api.delete(f"/event_destinations/{dest['id']}").status_code == 204
        with subscribed(api, kinesis, [{"type": "ip_policy_created.v0"}]) as dest:
            policies = [made(api, "/ip_policies", {"description": f"p{i}"}) for i in (1, 2)]
            failing = wait_for("a failed attempt", lambda: d if (d := delivery(
                api, dest["id"]))["attempts"] >= 2 else None)
            assert "without marking which" in failing["last_error"]
            streams.refuse = False
            wait_for("the delivery", lambda: delivery(api, dest["id"])["delivered"] >= 2)
    sent = [e["object"]["id"] for call in streams.taken for e in call]
    assert sent == [p["id"] for p in policies]
