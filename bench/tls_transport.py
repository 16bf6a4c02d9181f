"""TLS transport micro-benchmark: what the tunnel's TLS costs the server per MB, through
uvloop's TLS transport (a memory BIO: each record is copied into and out of OpenSSL's BIO, as
``edgeway serve`` runs it) against a non-blocking ``ssl.SSLSocket`` driven by the event loop's
``add_reader``/``add_writer`` (OpenSSL reads and writes the descriptor itself).

A server process (uvloop) receives (up) or sends (down) ``--mib`` MiB over loopback TLS in
64 KiB writes, decrypting into a reused buffer; a blocking client in this process is the
peer. Both processes run on one core (the last; as bench.http_paths pins its server side), so
the wall rate is the sum of both ends' work and the server's CPU per MB is its own. The two
transports alternate for ``--rounds`` rounds; medians and the socket/uvloop ratios are
printed (below 1.0: the socket costs less).

Run from the repository root:  python -m bench.tls_transport [--mib N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import uvloop  # noqa: E402

from tests.edge.tls_upstream import localhost_contexts  # noqa: E402

CHUNK = 64 * 1024
BUFFER = 256 * 1024  # what the muxado session offers a read (and uvloop's most per read)
PAYLOAD = bytes(CHUNK)


class Transfer(asyncio.BufferedProtocol):
    """uvloop's TLS transport, decrypting into one reused buffer; or sending ``total``
    bytes, pausing at its write-buffer limit."""

    def __init__(self, direction: str, total: int, done: asyncio.Future[None]) -> None:
        self.direction, self.total, self.done = direction, total, done
        self.buffer = memoryview(bytearray(BUFFER))
        self.count = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's is not a subclass)
        if self.direction == "down":
            self.transport.set_write_buffer_limits(BUFFER)
            self.resume_writing()

    def resume_writing(self) -> None:
        assert self.transport is not None
        while self.count < self.total and self.transport.get_write_buffer_size() < BUFFER:
            self.transport.write(PAYLOAD)
            self.count += CHUNK

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        if self.direction == "down":  # the client's byte: it has everything
            self.done.set_result(None)
            return
        self.count += nbytes
        if self.count >= self.total and self.transport is not None:
            self.transport.write(b"k")

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def serve_uvloop(listener: socket.socket, context: ssl.SSLContext, direction: str,
                       total: int) -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    server = await loop.create_server(lambda: Transfer(direction, total, done),
                                      sock=listener, ssl=context)
    await done
    server.close()


async def wait_fd(fd: int, write: bool) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    (loop.add_writer if write else loop.add_reader)(fd, ready.set_result, None)
    try:
        await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def serve_socket(listener: socket.socket, context: ssl.SSLContext, direction: str,
                       total: int) -> None:
    loop = asyncio.get_running_loop()
    conn, _ = await loop.sock_accept(listener)
    tls = context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
    tls.setblocking(False)
    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            await wait_fd(tls.fileno(), write=False)
        except ssl.SSLWantWriteError:
            await wait_fd(tls.fileno(), write=True)
    fd, count = tls.fileno(), 0
    if direction == "up":
        buffer = memoryview(bytearray(BUFFER))
        while count < total:
            try:
                while count < total:
                    got = tls.recv_into(buffer)
                    if not got:
                        raise ConnectionError("the client left before the end")
                    count += got
            except ssl.SSLWantReadError:
                await wait_fd(fd, write=False)
        tls.setblocking(True)
        tls.sendall(b"k")
    else:
        while count < total:
            try:
                tls.send(PAYLOAD)  # (all of it: no partial writes; a retry sends the same)
                count += CHUNK
            except ssl.SSLWantWriteError:
                await wait_fd(fd, write=True)
        tls.setblocking(True)
        tls.recv(1)
    tls.close()


def server(kind: str, direction: str, total: int, listener: socket.socket,
           context: ssl.SSLContext, results: mp.Queue[float]) -> None:

    async def main() -> float:
        start = time.process_time()
        serve = serve_uvloop if kind == "uvloop" else serve_socket
        await serve(listener, context, direction, total)
        return time.process_time() - start

    results.put(uvloop.run(main()))


def one(kind: str, direction: str, total: int,
        contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> tuple[float, float]:
    """(MB/s, server CPU µs per MB) of one transfer."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    results: mp.Queue[float] = mp.Queue()
    context, client = contexts
    proc = mp.get_context("fork").Process(  # (the context is inherited, not pickled)
        target=server, args=(kind, direction, total, listener, context, results))
    proc.start()
    with client.wrap_socket(socket.create_connection(listener.getsockname()),
                            server_hostname="localhost") as tls:
        buffer, count = bytearray(CHUNK), 0
        start = time.perf_counter()
        if direction == "up":
            while count < total:
                tls.sendall(buffer)
                count += CHUNK
            tls.recv(1)
        else:
            while count < total:
                count += tls.recv_into(buffer)
            tls.sendall(b"x")
        wall = time.perf_counter() - start
    server_cpu = results.get(timeout=120)
    proc.join(30)
    listener.close()
    mib = total / (1 << 20)
    return mib / wall, server_cpu * 1e6 / mib


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    core = max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})  # (the server process inherits it)
    print(f"{args.mib} MiB each way, {args.rounds} interleaved rounds, both ends on CPU {core}")
    with tempfile.TemporaryDirectory() as tmp:
        contexts = localhost_contexts(Path(tmp))
        for direction in ("up", "down"):
            runs: dict[str, list[tuple[float, float]]] = {"uvloop": [], "socket": []}
            for _ in range(args.rounds):
                for kind, rows in runs.items():
                    rows.append(one(kind, direction, args.mib << 20, contexts))
            medians = {kind: (statistics.median(r[0] for r in rows),
                              statistics.median(r[1] for r in rows))
                       for kind, rows in runs.items()}
            for kind, (rate, us) in medians.items():
                print(f"{direction:4} {kind:7} {rate:6.0f} MB/s  server {us:5.0f} µs/MB")
            (rate_u, us_u), (rate_s, us_s) = medians["uvloop"], medians["socket"]
            print(f"{direction:4} socket/uvloop: rate {rate_s / rate_u:.2f}x, "
                  f"server CPU {us_s / us_u:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
