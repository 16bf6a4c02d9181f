"""A node's traffic sink reading changed subscriptions: an event that happens after a change
(a subscription's 201) is routed by it, whenever in the sink's rounds the change comes.
In-process sinks on the real store (SQLite file, PostgreSQL database) of a real server,
sending to the HTTPS Datadog stand-in."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from edgeway.config import EventsConfig
from edgeway.edge.traffic import TCP, tcp_object
from edgeway.events.targets import Clients, Targets
from edgeway.events.traffic import CHUNK, TrafficSink
from edgeway.pki import seal
from edgeway.store.migrate import open_database
from tests.conftest import BACKENDS
from tests.events.capture import Capture
from tests.events.conftest import AWS_ENV, event_args, made, wait_len
from tests.events.test_changes import monitoring
from tests.events.test_traffic import by_type
from tests.server import Server, fresh_pg_database, start

TCP_SOURCES = {"sources": [{"type": "tcp_connection_closed.v0"}]}


def record(client_ip: str) -> tuple[object, ...]:
    """What the TCP listener queues for one closed connection."""
    return (client_ip, 5555, 7000, 3, 4, time.time() - 1, 1.0, None, None)


@contextmanager
def events_server(tmp_path: Path, backend: str, cap: Capture, moto: str) -> Iterator[Server]:
    with ExitStack() as stack:
        url = stack.enter_context(fresh_pg_database()) if backend == "postgres" else None
        srv = start(tmp_path / "srv", url, *event_args(cap, moto), env=AWS_ENV)
        try:
            yield srv
        finally:
            assert srv.stop() == 0


def with_sink(srv: Server, cap: Capture, body: Callable[[TrafficSink], Awaitable[None]],
              queue: int = 10_000) -> None:
    """``body(sink)`` with a sink of a node on ``srv``'s store (not started; it holds
    ``queue`` events), stopped after."""
    async def main() -> None:
        db = await open_database(srv.database_url, srv.data_dir)
        options = EventsConfig(datadog_url=cap.url, ca_file=cap.ca_file, queue=queue)
        targets = Targets(seal.load(srv.data_dir), Clients(options, "node"))
        sink = TrafficSink(db, targets, options)
        try:
            await body(sink)
        finally:
            await sink.stop()
            await targets.clients.close()
            await db.close()
    asyncio.run(main())


def clients(cap: Capture, tags: str) -> set[str]:
    return {e["object"]["conn"]["client_ip"] for e in by_type(cap, tags,
                                                               "tcp_connection_closed.v0")}


@pytest.mark.skipif("postgres" not in BACKENDS, reason="reads on SQLite do not yield")
def test_a_sink_reading_its_subscriptions_queues_every_event_meanwhile(
        tmp_path: Path, cap: Capture, moto: str) -> None:
    """While the sink reads the subscriptions it has not read yet (on PostgreSQL the loop
    serves traffic meanwhile), ``wants`` must not answer by those of before (there were
    none: the event was never queued and so lost)."""
    tags = f"run:{secrets.token_hex(4)}"
    with events_server(tmp_path, "postgres", cap, moto) as srv:
        with srv.client() as api:
            dest = made(api, "/event_destinations", {"target": monitoring(tags)})
            made(api, "/event_subscriptions", {**TCP_SOURCES, "destination_ids": [dest["id"]]})

        async def body(sink: TrafficSink) -> None:
            starting = asyncio.create_task(sink.start())
            looks = 0
            while not starting.done():  # every turn of the loop while it reads
                looks += 1
                assert sink.wants(TCP), f"an event at turn {looks} of the read was not wanted"
                await asyncio.sleep(0)
            await starting
            assert looks > 1  # (the read did let the loop run)
            sink.emit(TCP, tcp_object, record("192.0.2.10"))
        with_sink(srv, cap, body)
        assert wait_len("the event", lambda: sorted(clients(cap, tags)), 1,
                        timeout=10) == ["192.0.2.10"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_event_after_a_change_in_the_middle_of_a_round_is_routed_by_it(
        tmp_path: Path, cap: Capture, moto: str, backend: str) -> None:
    """The sink routes a round in slices, the loop serving traffic in between: a subscription
    made there (its 201 sent), then a connection that closes, and that connection's event is
    routed by the new subscription, not by the round's routing of before (none: lost)."""
    tags = f"run:{secrets.token_hex(4)}"
    with events_server(tmp_path, backend, cap, moto) as srv:
        with srv.client() as api:
            dest = made(api, "/event_destinations", {"target": monitoring(tags)})

            async def body(sink: TrafficSink) -> None:
                await sink.start()  # (no subscription yet)
                made(api, "/event_subscriptions",
                     {**TCP_SOURCES, "destination_ids": [dest["id"]]})
                slices, route = 0, sink.route

                def sliced(limit: int | None = None) -> bool:
                    nonlocal slices
                    more = route(limit)
                    slices += 1
                    if slices == 1:  # between the first two slices: the change, then traffic
                        assert more
                        sink.changed("event_subscriptions")
                        sink.emit(TCP, tcp_object, record("192.0.2.20"))
                    return more
                sink.route = sliced  # type: ignore[method-assign]
                for n in range(3 * CHUNK):  # a round of several slices
                    sink.emit(TCP, tcp_object, record(f"198.51.100.{n % 200}"))
                deadline = time.monotonic() + 30
                while slices < 2:  # (the sink routes every 0.2 s)
                    assert time.monotonic() < deadline, "the queue was not routed"
                    await asyncio.sleep(0.01)
            with_sink(srv, cap, body)
        got = wait_len("the event after the change", lambda: sorted(
            clients(cap, tags) & {"192.0.2.20"}), 1, timeout=10)
        assert got == ["192.0.2.20"]


def test_events_dropped_before_a_change_is_read_are_counted_for_its_destinations(
        tmp_path: Path, cap: Capture, moto: str) -> None:
    """A full queue drops events; while the sink has not read a change they are counted for
    the destinations of the subscriptions it then reads (they were not counted at all)."""
    tags = f"run:{secrets.token_hex(4)}"
    with events_server(tmp_path, "sqlite", cap, moto) as srv, srv.client() as api:
        dest = made(api, "/event_destinations", {"target": monitoring(tags)})
        made(api, "/event_subscriptions", {**TCP_SOURCES, "destination_ids": [dest["id"]]})

        async def body(sink: TrafficSink) -> None:  # (not read yet: the queue fills)
            for n in range(30):
                sink.emit(TCP, tcp_object, record(f"198.51.100.{n}"))
            await sink.start()
        with_sink(srv, cap, body, queue=10)
        assert wait_len("the queued events", lambda: sorted(clients(cap, tags)), 10,
                        timeout=10) == sorted(f"198.51.100.{n}" for n in range(10))
        state = api.get(f"/event_destinations/{dest['id']}").json()["delivery"]
        assert (state["delivered"], state["dropped"]) == (10, 20), state
