"""The PROXY protocol's socket side (``edgeway.proxied``) and the accept loop reading it
(``edgeway.accept``), in process over real loopback sockets: the header is consumed and not a
byte more, a slow or wrong one is refused within its deadline, a trusted load balancer's
connection is served as its header's client (and capped as that client), a connection from
any other address as itself, whatever it sends; and the options ``edgeway serve`` refuses."""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import re
import socket
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from edgeway.accept import Acceptor, Peer
from edgeway.caps import Caps, CapsConfig
from edgeway.cli import parser
from edgeway.proxied import Trust, read_header
from edgeway.proxy_protocol import Header, Refused
from edgeway.serve_cli import server_config
from tests.test_proxy_protocol import FOLLOWING, inet, v2

V1 = b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n"
V2 = v2(addresses=inet("2001:db8::7", "2001:db8::1", 4000, 443), family=2)


def waiting(sock: socket.socket) -> int:
    """Bytes received on ``sock`` and not read yet."""
    return int.from_bytes(fcntl.ioctl(sock, termios.FIONREAD, b"\0\0\0\0"), "little")


@asynccontextmanager
async def pair() -> AsyncIterator[tuple[socket.socket, socket.socket]]:
    """A connected loopback pair: the server's end (non-blocking) and the client's."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    server.setblocking(False)
    try:
        yield server, client
    finally:
        server.close()
        client.close()


async def read(sock: socket.socket, timeout: float = 5) -> Header | Refused:
    return await asyncio.wait_for(read_header(sock, timeout), timeout + 5)


@pytest.mark.parametrize("header", [V1, V2])
def test_the_header_is_consumed_and_what_follows_is_left_unread(header: bytes) -> None:
    async def main() -> None:
        async with pair() as (server, client):
            client.sendall(header + FOLLOWING)
            got = await read(server)
            assert isinstance(got, Header) and got.length == len(header)
            server.setblocking(True)
            assert server.recv(1000) == FOLLOWING
    asyncio.run(main())


@pytest.mark.parametrize("header", [V1, V2])
def test_a_header_sent_a_byte_at_a_time_is_taken_as_it_comes(header: bytes) -> None:
    """Bytes of an unfinished header are read as they come (they are the header's), so a
    slow sender leaves nothing readable to spin on; the last one ends it."""
    async def main() -> None:
        async with pair() as (server, client):
            reading = asyncio.create_task(read(server))
            for byte in header[:-1]:
                client.sendall(bytes([byte]))
                deadline = time.monotonic() + 5
                while waiting(server):  # (the condition: the reader took it)
                    assert time.monotonic() < deadline, "the byte was left unread"
                    await asyncio.sleep(0.001)
                assert not reading.done()
            client.sendall(header[-1:] + FOLLOWING)
            got = await reading
            assert isinstance(got, Header) and got.source is not None
            assert waiting(server) == len(FOLLOWING)
    asyncio.run(main())


@pytest.mark.parametrize(("sent", "close", "reason"), [
    (b"", False, "no complete PROXY header within 1 s (0 bytes came)"),
    (V1[:20], False, "no complete PROXY header within 1 s (20 bytes came)"),
    (V2[:20], False, "no complete PROXY header within 1 s (20 bytes came)"),
    (b"", True, "closed before a PROXY header"),
    (V1[:20], True, "closed after 20 bytes, before a complete PROXY header"),
    (b"GET / HTTP/1.1\r\n", False, "did not begin with a PROXY protocol header"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n", False, "ports are not numbers"),
])
def test_a_missing_slow_or_bad_header_is_refused_within_the_deadline(
        sent: bytes, close: bool, reason: str) -> None:
    async def main() -> tuple[Header | Refused, float]:
        async with pair() as (server, client):
            client.sendall(sent)
            if close:
                client.shutdown(socket.SHUT_WR)
            began = time.monotonic()
            return await read(server, 1.0), time.monotonic() - began
    got, took = asyncio.run(main())
    assert isinstance(got, Refused) and reason in got.reason, got
    assert took < 3
    if "within" not in reason:
        assert took < 0.8  # decided by the bytes, not by the deadline


# -- the accept loop --------------------------------------------------------------------------

Seen = list[tuple[Peer, bytes]]


@asynccontextmanager
async def acceptor(per_address: int = 100, timeout: float = 5
                   ) -> AsyncIterator[tuple[int, Seen, asyncio.Event]]:
    """A listener trusting 127.0.0.1 only; its handler notes each client's peer and first
    bytes and holds the connection until the event is set."""
    seen: Seen = []
    release = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      peer: Peer) -> None:
        seen.append((peer, await reader.read(100)))
        writer.write(b"ok")
        await release.wait()

    door = Caps(CapsConfig(per_address)).door("test listener", refusal=lambda cap: cap.encode())
    sock = socket.create_server(("127.0.0.1", 0))
    trust = Trust((ipaddress.ip_network("127.0.0.1/32"),), timeout)
    server = Acceptor.streams(sock, door, handler, trust=trust).start()
    try:
        yield sock.getsockname()[1], seen, release
    finally:
        release.set()
        server.close()


async def connect(port: int, source: str, data: bytes
                  ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(data)
    return reader, writer


async def answer(reader: asyncio.StreamReader) -> bytes:
    """What the listener answered; b"" when it closed (a reset, when what was sent was left
    unread)."""
    try:
        return await asyncio.wait_for(reader.read(100), 10)
    except ConnectionResetError:
        return b""


def test_a_trusted_proxy_is_served_as_its_headers_client_and_others_as_themselves() -> None:
    async def main() -> tuple[Seen, list[bytes]]:
        async with acceptor(timeout=0.5) as (port, seen, _release):
            answers = []
            for source, data in [("127.0.0.1", V1 + b"hello"), ("127.0.0.1", V2 + b"hi"),
                                 ("127.0.0.2", V1 + b"x"),  # not trusted: its bytes, as sent
                                 ("127.0.0.1", b"hello"), ("127.0.0.1", b"")]:  # no header
                reader, writer = await connect(port, source, data)
                answers.append(await answer(reader))
                writer.close()
            return seen, answers
    seen, answers = asyncio.run(main())
    assert answers == [b"ok", b"ok", b"ok", b"", b""]  # the last two: closed, never served
    assert seen[0] == (("192.0.2.7", 56324), b"hello")
    assert seen[1] == (("2001:db8::7", 4000), b"hi")
    assert seen[2][0][0] == "127.0.0.2" and seen[2][1].startswith(V1[:20])  # never believed
    assert len(seen) == 3


def test_the_per_address_cap_counts_a_proxys_clients_each_not_the_proxy() -> None:
    def header(client: str) -> bytes:
        return f"PROXY TCP4 {client} 127.0.0.1 1000 80\r\n".encode() + b"x"

    async def main() -> list[bytes]:
        async with acceptor(per_address=2) as (port, _seen, _release):
            held, answers = [], []
            for source, data in [("127.0.0.1", header("10.0.0.1")),
                                 ("127.0.0.1", header("10.0.0.1")),
                                 ("127.0.0.1", header("10.0.0.1")),  # the client's third
                                 ("127.0.0.1", header("10.0.0.2")),  # the proxy's fourth
                                 ("127.0.0.1", header("10.0.0.2")),
                                 ("127.0.0.3", b"a"), ("127.0.0.3", b"b"),
                                 ("127.0.0.3", b"c")]:  # a direct client's third
                reader, writer = await connect(port, source, data)
                held.append(writer)
                answers.append(await answer(reader))
            for writer in held:
                writer.close()
            return answers
    assert asyncio.run(main()) == [b"ok", b"ok", b"per_address", b"ok", b"ok",
                                   b"ok", b"ok", b"per_address"]


# -- the options ------------------------------------------------------------------------------

def configured(tmp_path: Path, *args: str) -> Trust | None:
    """What ``edgeway serve ARGS`` would run with (ValueError: what it would refuse)."""
    return server_config(parser().parse_args(["serve", "--data-dir", str(tmp_path),
                                              *args])).proxy


@pytest.mark.parametrize(("args", "words"), [
    (["--proxy-protocol"], "--proxy-protocol needs --trusted-proxies"),
    (["--trusted-proxies", "10.0.0.0/8"], "--trusted-proxies is only used with "
                                          "--proxy-protocol"),
    (["--proxy-protocol-timeout", "3"], "--proxy-protocol-timeout is only used with"),
    (["--proxy-protocol", "--trusted-proxies", "10.0.0.1/8"],
     "'10.0.0.1/8' has bits set after its prefix: 10.0.0.0/8 is the network"),
    (["--proxy-protocol", "--trusted-proxies", "lb.example.com"],
     "'lb.example.com' is not an IP address or CIDR"),
    (["--proxy-protocol", "--trusted-proxies", "10.0.0.0/8,::/0"],
     "'::/0' would believe a PROXY header from any address"),
    (["--proxy-protocol", "--trusted-proxies", "10.0.0.5", "--proxy-protocol-timeout", "0"],
     "--proxy-protocol-timeout 0 must be more than 0 and at most 300 seconds"),
])
def test_options_that_cannot_mean_anything_are_refused(tmp_path: Path, args: list[str],
                                                       words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        configured(tmp_path, *args)


def test_the_options_and_their_environment_variables(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert configured(tmp_path) is None  # (off by default)
    trust = configured(tmp_path, "--proxy-protocol", "--trusted-proxies",
                       "10.0.0.0/8, 192.0.2.5,2001:db8::/32,10.0.0.0/8")
    assert trust == Trust(tuple(ipaddress.ip_network(n) for n in (
        "10.0.0.0/8", "192.0.2.5/32", "2001:db8::/32")), 5.0)
    assert trust.trusts("10.9.8.7") and trust.trusts("::ffff:10.0.0.1")
    assert not trust.trusts("192.0.2.6") and not trust.trusts("not an address")
    monkeypatch.setenv("EDGEWAY_PROXY_PROTOCOL", "true")
    monkeypatch.setenv("EDGEWAY_TRUSTED_PROXIES", "192.0.2.0/24")
    monkeypatch.setenv("EDGEWAY_PROXY_PROTOCOL_TIMEOUT", "2.5")
    assert configured(tmp_path) == Trust((ipaddress.ip_network("192.0.2.0/24"),), 2.5)
    monkeypatch.setenv("EDGEWAY_PROXY_PROTOCOL", "0")  # off, with proxies named: refused
    with pytest.raises(ValueError, match="--trusted-proxies is only used with"):
        configured(tmp_path)


def test_serve_refuses_them_with_its_usage_error(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    r = subprocess.run([sys.executable, "-m", "edgeway", "serve", "--data-dir",
                        str(tmp_path), "--proxy-protocol"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "--proxy-protocol needs --trusted-proxies" in r.stderr
    with pytest.raises(SystemExit):
        parser().parse_args(["serve", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    for var in ("EDGEWAY_PROXY_PROTOCOL]", "EDGEWAY_TRUSTED_PROXIES]",
                "EDGEWAY_PROXY_PROTOCOL_TIMEOUT]"):
        assert var in helped, var
