"""How the gateway puts packets on the wire and carries a channel (``sshgw/wire.py``,
``sshgw/channels.ChannelPipe``): the real OpenSSH client sees no ignore packets; writes of
one loop pass reach a real socket together and a close sends what is held; a channel pipe,
between an in-process asyncssh server and client on loopback, pauses its channel while a
reader lags, then delivers every byte in order, and carries the other way up to its EOF."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable

import asyncssh
import pytest

from edgeway.sshgw import wire
from edgeway.sshgw.channels import MAX_PACKET, WINDOW, ChannelPipe
from edgeway.sshgw.server import ENCRYPTION, MACS
from edgeway.tunnel.pipes import READ_MAX
from tests.server import Server
from tests.sshgw.client import SshUser
from tests.sshgw.test_gateway import _public
from tests.waiting import until


def test_no_cbc_cipher_is_offered() -> None:
    """Dropping asyncssh's empty ignore packets rests on this (RFC 4251 §9.3.1)."""
    assert ENCRYPTION and not [c for c in ENCRYPTION if "cbc" in c]


def test_the_client_receives_no_ignore_packets(server: Server, user: SshUser,
                                               service: int) -> None:
    """OpenSSH at -vvv names each SSH_MSG_IGNORE it receives; asyncssh sent one before every
    packet after the key exchange (so several per request)."""
    with server.client() as api:
        user.credential(api)
    ssh = user.start(f"0:localhost:{service}", command=["http"], options=("-vvv",))
    [url] = ssh.urls()
    for n in range(5):
        r = _public(server, url, f"/w{n}")
        assert (r.status_code, r.text) == (200, f"svc /w{n}")
    ssh.wait_for(r"GET\s+/w4  200 OK")
    err = ssh.stderr()
    assert "debug3: " in err  # (-vvv is on)
    assert "SSH2_MSG_IGNORE" not in err
    ssh.stop()


async def _loopback() -> tuple[asyncio.StreamWriter, socket.socket]:
    listener = socket.create_server(("127.0.0.1", 0))
    _, writer = await asyncio.open_connection(*listener.getsockname())
    peer, _ = listener.accept()
    listener.close()
    peer.setblocking(False)
    return writer, peer


async def _received(peer: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    got = b""
    async with asyncio.timeout(10):
        while len(got) < size:
            chunk = await loop.sock_recv(peer, 65536)
            if not chunk:
                break
            got += chunk
    return got


def test_writes_of_one_pass_go_out_together_and_close_sends_what_is_held() -> None:
    async def main() -> None:
        writer, peer = await _loopback()
        with peer:
            out = wire.Coalesced(writer.transport)  # type: ignore[arg-type]
            for part in (b"one ", b"two ", b"three"):
                out.write(part)
            with pytest.raises(BlockingIOError):  # held: nothing on the socket yet
                peer.recv(100)
            assert await _received(peer, 13) == b"one two three"  # the next loop pass
            out.write(b"last")
            out.close()  # (in the same pass: what is held goes first, then the end)
            assert await _received(peer, 1 << 20) == b"last"
    asyncio.run(main())


Pair = tuple[asyncssh.SSHServerConnection, asyncssh.SSHClientConnection]


@contextlib.asynccontextmanager
async def _ssh_pair() -> AsyncIterator[Pair]:
    """An asyncssh server (the gateway's algorithms and wire changes) and a client on
    loopback, connected."""
    made: asyncio.Future[asyncssh.SSHServerConnection] = \
        asyncio.get_running_loop().create_future()

    class Gateway(asyncssh.SSHServer):
        def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
            wire.coalesce(conn)
            wire.no_cbc_ignores(conn)
            wire.quiet(conn)
            made.set_result(conn)

        def begin_auth(self, username: str) -> bool:
            return False

        def server_requested(self, listen_host: str, listen_port: int) -> bool:
            return True

    key = asyncssh.generate_private_key("ssh-ed25519")
    acceptor = await asyncssh.listen(
        "127.0.0.1", 0, server_host_keys=[key], server_factory=Gateway,
        encryption_algs=ENCRYPTION, mac_algs=MACS, config=None)
    client = await asyncssh.connect("127.0.0.1", acceptor.get_port(), known_hosts=None,
                                    username="t", config=None, client_keys=None)
    try:
        yield await made, client
    finally:
        client.close()
        acceptor.close()


async def _dest(handle: Callable[[socket.socket], None]) -> tuple[int, asyncio.Future[None]]:
    """A local service the client dials, served by ``handle`` in a thread."""
    listener = socket.create_server(("127.0.0.1", 0))
    loop = asyncio.get_running_loop()

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
        with conn:
            handle(conn)

    return listener.getsockname()[1], asyncio.ensure_future(loop.run_in_executor(None, serve))


async def _open(pair: Pair, dest: int) -> ChannelPipe:
    """A channel the server opens on a remote forward of the client to port ``dest``."""
    server, client = pair
    forward = await client.forward_remote_port("127.0.0.1", 0, "127.0.0.1", dest)
    _, pipe = await server.create_connection(ChannelPipe, "127.0.0.1", forward.get_port(),
                                             "192.0.2.1", 5, window=WINDOW,
                                             max_pktsize=MAX_PACKET)
    assert isinstance(pipe, ChannelPipe)
    return pipe


async def _window_shut(pipe: ChannelPipe, seconds: float = 30) -> None:
    """Until the client has used up the channel's window: it can send nothing more. (Polled
    with a deadline: asyncssh tells of no such moment.)"""
    def shut() -> bool:
        return pipe.chan is not None and pipe.chan._recv_window <= 0  # (asyncssh's own count)

    await until(shut, lambda: f"the client still had window with {pipe._size} bytes held: "
                "reading never paused", seconds)


def test_a_lagging_reader_pauses_the_channel_and_loses_nothing() -> None:
    payload = bytes(range(251)) * (16 * 4177)  # ~16 MiB, not a multiple of any buffer

    async def main() -> None:
        async with _ssh_pair() as pair:
            port, sent = await _dest(lambda conn: conn.sendall(payload))
            pipe = await _open(pair, port)
            got = bytearray()
            reads = 0
            async with asyncio.timeout(60):
                while True:
                    if reads < 3:  # the first reads lag until the client cannot send
                        await _window_shut(pipe)
                        assert pipe._paused
                    chunk = await pipe.read()
                    if not chunk:
                        break
                    assert len(chunk) <= READ_MAX + WINDOW  # bounded: the client stopped
                    got += chunk
                    reads += 1
            await sent
            assert bytes(got) == payload and pipe.ended
    asyncio.run(main())


def test_writes_reach_the_service_and_its_end_is_seen() -> None:
    payload = bytes(range(256)) * 16384  # 4 MiB, past the client's window

    def echo_back_count(conn: socket.socket) -> None:
        total = 0
        while chunk := conn.recv(1 << 16):
            total += len(chunk)
        conn.sendall(str(total).encode())

    async def main() -> None:
        async with _ssh_pair() as pair:
            port, served = await _dest(echo_back_count)
            pipe = await _open(pair, port)
            async with asyncio.timeout(60):
                for at in range(0, len(payload), 1 << 20):
                    await pipe.write(payload[at:at + (1 << 20)])
                await pipe.write_eof()
                assert await pipe.read() == str(len(payload)).encode()
                assert await pipe.read() == b""  # the service closed: EOF
                await served
            assert pipe.ended
            pipe.close()
    asyncio.run(main())


@pytest.mark.parametrize("level", [1, 3])
def test_packet_log_lines_are_made_only_when_asyncssh_writes_them(
        level: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """At asyncssh's default debug level (1) the gateway's connection and open channels format
    no packet log line (the client's own, untouched, do); at level 3, where asyncssh writes
    them, they still do."""
    formatted: list[object] = []
    original = asyncssh.packet.SSHPacketLogger._log_packet

    def counted(self: object, *args: object, **kwargs: object) -> None:
        formatted.append(self)
        original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(asyncssh.packet.SSHPacketLogger, "_log_packet", counted)
    monkeypatch.setattr(asyncssh.logging.SSHLogger, "_debug_level", level)

    async def main() -> None:
        async with _ssh_pair() as pair:
            port, served = await _dest(lambda conn: conn.sendall(b"x" * (1 << 20)))
            pipe = await _open(pair, port)
            formatted.clear()  # (a channel is quieted once it is open: from its first data)
            async with asyncio.timeout(60):
                got = 0
                while chunk := await pipe.read():
                    got += len(chunk)
                await served
            assert got == 1 << 20
            server, client = pair
            ours = sum(1 for h in formatted if h is server or h is pipe.chan)
            theirs = sum(1 for h in formatted if h is client)
            assert theirs > 0  # (the count sees packets)
            assert (ours > 0) == (level >= wire.PACKET_LOGGING), (level, ours)
    asyncio.run(main())
