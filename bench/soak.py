"""Soak: one agent session of the official ngrok SDK under many public connections, and the
tunnel listener under rounds of abuse. Prints counts and ratios, not timings to meet.

1. Through one SDK HTTP endpoint (plain HTTP listener; the upstream is the tests' uvicorn
   service): 5,000 sequential fresh connections; 5,000 in ten waves of 500 and a burst of
   2,000 at once; 10,000 idle kept-alive connections held open (each after one request) while
   500 fresh requests are served, then each held connection asked once more. For each: the
   answers by status, and whether the agent's session stayed the same one (the SDK ends its
   session when the server has more than 512 streams open towards it).
2. The tunnel listener: ten rounds of 200 TLS connections each sending 64 KiB of random
   bytes, opening 2,000 streams before authenticating (a SYN flood) or sending one oversized
   frame; then 400 connections that only complete the TLS handshake (closed after the 10 s
   authentication limit). The server's VmRSS at the end of each round and once it has
   settled (unmoved for 2 s: the server hands freed memory back to the system every second or
   so), the ratio of the settled sizes after the last and the first round (and the third),
   and the number of log lines the abuse produced.
3. Slowloris against the connection caps (``bench.slowloris``): the server's descriptors in
   use with slow-header connections at the per-address and the process's caps, and a normal
   request's latency meanwhile.

Run from the repository root:  python -m bench.soak [--rounds N]
Needs the ngrok SDK (``pip install --ignore-requires-python ngrok==1.7.0``). Takes about two
minutes. Exit status 1 if a request failed or the session was replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench import slowloris
from tests.edge import upstream
from tests.edge.agents import agent
from tests.edge.test_streams import fetch, session_starts, sessions, tally
from tests.server import Server, start
from tests.tunnel.test_abuse import abuse, rss_mib, settled_mib


async def _held(port: int, host: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /held HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    await asyncio.wait_for(reader.readuntil(b"svc /held"), 60)
    return reader, writer


async def _again(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str
                 ) -> bytes:
    try:
        writer.write(f"GET /again HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        await asyncio.wait_for(reader.readuntil(b"svc /again"), 60)
        return b"HTTP/1.1 200 OK"
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
        return type(exc).__name__.encode()


async def connections(srv: Server, host: str) -> bool:
    port = srv.http_port
    first, starts = sessions(srv), session_starts(srv)
    ok = True

    def report(name: str, results: list[bytes], seconds: float) -> None:
        nonlocal ok
        same = sessions(srv) == first and session_starts(srv) == starts
        ok = ok and same and set(results) == {b"HTTP/1.1 200 OK"}
        counts = {k.decode(errors="replace"): v for k, v in tally(results).items()}
        print(f"  {name:<44} {counts}  {len(results) / seconds:,.0f}/s  "
              f"same session: {'yes' if same else 'NO'}")

    t0 = time.monotonic()
    results = [await fetch(port, host) for _ in range(5000)]
    report("5,000 sequential connections", results, time.monotonic() - t0)
    t0 = time.monotonic()
    results = []
    for _ in range(10):
        results += await asyncio.gather(*[fetch(port, host) for _ in range(500)])
    report("5,000 connections in waves of 500", results, time.monotonic() - t0)
    t0 = time.monotonic()
    results = list(await asyncio.gather(*[fetch(port, host) for _ in range(2000)]))
    report("a burst of 2,000 connections", results, time.monotonic() - t0)
    before = rss_mib(srv.proc.pid)
    held = []
    t0 = time.monotonic()
    for _ in range(20):
        held += await asyncio.gather(*[_held(port, host) for _ in range(500)])
    print(f"  10,000 kept-alive connections held open in {time.monotonic() - t0:.1f} s; "
          f"server VmRSS {before:.0f} -> {rss_mib(srv.proc.pid):.0f} MiB "
          f"({(rss_mib(srv.proc.pid) - before) * 1024 / 10000:.1f} KiB a connection)")
    t0 = time.monotonic()
    results = list(await asyncio.gather(*[fetch(port, host) for _ in range(500)]))
    report("500 fresh requests while 10,000 are held", results, time.monotonic() - t0)
    t0 = time.monotonic()
    results = []
    for i in range(0, len(held), 500):
        results += await asyncio.gather(*[_again(r, w, host) for r, w in held[i:i + 500]])
    report("a second request on each held connection", results, time.monotonic() - t0)
    for _, writer in held:
        writer.close()
    return ok


async def abuse_rounds(srv: Server, rounds: int) -> None:
    ctx = ssl.create_default_context(cafile=str(srv.data_dir / "ca.pem"))
    pid = srv.proc.pid
    lines = len(srv.log().splitlines())
    kinds = ["random", "syn", "big-frame"]
    sizes: list[float] = []
    ends: list[float] = []
    start_rss = rss_mib(pid)
    for _ in range(rounds):
        waits = await asyncio.gather(*[abuse(srv, kinds[i % 3], ctx) for i in range(200)])
        ends.append(rss_mib(pid))
        sizes.append(await settled_mib(pid))
        print(f"  round {len(sizes):>2}: VmRSS {ends[-1]:5.0f} MiB at its end, {sizes[-1]:5.0f} "
              f"MiB settled; slowest close {max(waits):.2f} s")
    t0 = time.monotonic()
    await asyncio.gather(*[abuse(srv, "handshake-only", ctx) for _ in range(400)])
    print(f"  400 handshake-only connections closed after {time.monotonic() - t0:.1f} s; "
          f"VmRSS {rss_mib(pid):.0f} MiB")
    print(f"  VmRSS before {start_rss:.0f} MiB; settled, round {rounds} / round 1: "
          f"{sizes[-1] / sizes[0]:.2f}, round {rounds} / round 3: {sizes[-1] / sizes[2]:.2f}; "
          f"at the rounds' ends, round {rounds} / round 1: {ends[-1] / ends[0]:.2f}")
    events = Counter(json.loads(line)["event"] for line in srv.log().splitlines()[lines:])
    print(f"  log lines during the abuse, by event: {dict(events) or 'none'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    # (10,000 held connections come from one address: more than its default cap)
    srv = start(Path(tempfile.mkdtemp()) / "soak", None, "--max-connections-per-address", "0")
    try:
        with srv.client() as api:
            token = api.post("/credentials", json={}).json()["token"]
        with upstream.running("svc") as port:
            sdk = agent(srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{port}"})
            host = sdk.urls[0].split("://", 1)[1]
            print("Public connections through one SDK agent session:")
            ok = asyncio.run(connections(srv, host))
            sdk.stop()
        print(f"Abuse of the tunnel listener ({args.rounds} rounds of 200 connections):")
        asyncio.run(abuse_rounds(srv, args.rounds))
    finally:
        srv.stop()
    slowloris.main()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
