"""Traffic events when the server stops: what is queued is sent on the way out, routed by the
subscriptions as they are at the stop."""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path

from edgeway.config import EventsConfig
from edgeway.edge.traffic import TCP, tcp_object
from edgeway.events.targets import Clients, Targets
from edgeway.events.traffic import TrafficSink
from edgeway.pki import seal
from edgeway.store.migrate import open_database
from tests.events.capture import Capture
from tests.events.conftest import AWS_ENV, event_args, made, wait_len
from tests.events.test_changes import monitoring
from tests.events.test_traffic import by_type, tcp_connect
from tests.server import free_port, start

TCP_SOURCES = {"sources": [{"type": "tcp_connection_closed.v0"}]}


def test_a_clean_shutdown_sends_what_is_queued(tmp_path: Path, cap: Capture, moto: str,
                                               echo_port: int) -> None:
    tags, port = f"run:{secrets.token_hex(4)}", free_port()
    srv = start(tmp_path / "srv", None, *event_args(cap, moto), env=AWS_ENV)
    try:
        with srv.client() as api:
            echo = made(api, "/backends/static", {"address": f"127.0.0.1:{echo_port}"})
            made(api, "/edges/tcp", {"hostports": [f"db.edgeway.localhost:{port}"],
                                     "backend": {"backend_id": echo["id"]}})
            dest = made(api, "/event_destinations", {"target": monitoring(tags)})
            made(api, "/event_subscriptions", {**TCP_SOURCES, "destination_ids": [dest["id"]]})
        sock = tcp_connect(port)
        sock.sendall(b"bye")
        assert sock.recv(3) == b"bye"
    finally:  # the shutdown closes the connection, whose event is queued as the server stops
        assert srv.stop() == 0
    sock.close()
    got = wait_len("the event sent on the way out", lambda: by_type(
        cap, tags, "tcp_connection_closed.v0"), 1, timeout=5)
    assert got[0]["object"]["conn"]["server_port"] == port
    assert got[0]["object"]["conn"]["bytes_in"] == 3


def test_what_is_queued_at_the_stop_is_routed_by_a_subscription_made_just_before(
        tmp_path: Path, cap: Capture, moto: str) -> None:
    """A subscription's 201 came, and its event was queued, before the sink read the change
    (it reads changes every 0.2 s): stopping reads it, rather than routing the event by the
    subscriptions of before (none: the event was lost)."""
    tags, data_dir = f"run:{secrets.token_hex(4)}", tmp_path / "srv"
    srv = start(data_dir, None, *event_args(cap, moto), env=AWS_ENV)
    try:
        with srv.client() as api:
            dest = made(api, "/event_destinations", {"target": monitoring(tags)})
            made(api, "/event_subscriptions", {**TCP_SOURCES, "destination_ids": [dest["id"]]})
    finally:
        assert srv.stop() == 0

    async def main() -> None:  # the sink of a node whose subscriptions just changed
        db = await open_database(None, data_dir)
        options = EventsConfig(datadog_url=cap.url, ca_file=cap.ca_file)
        targets = Targets(seal.load(data_dir), Clients(options, "node"))
        sink = TrafficSink(db, targets, options)
        try:
            assert sink.wants(TCP)  # (not read yet: every event is queued)
            sink.emit(TCP, tcp_object, ("192.0.2.7", 5555, 7000, 3, 4, time.time() - 1, 1.0,
                                        None, None))
            await sink.stop()
        finally:
            await targets.clients.close()
            await db.close()

    asyncio.run(main())
    got = wait_len("the event queued before the change was read", lambda: by_type(
        cap, tags, "tcp_connection_closed.v0"), 1, timeout=10)
    assert got[0]["object"]["conn"]["client_ip"] == "192.0.2.7"
    assert got[0]["object"]["conn"]["bytes_in"] == 3
