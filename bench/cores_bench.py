"""The protocol cores compiled (``edgeway/native.py``) against their pure-Python sources, in
process: an HTTP/1.1 exchange through the edge's parsers and head writers (a request parsed,
its head written for the upstream, a response parsed, its head written for the client), and a
muxado DATA frame from one session to another. Each side runs in its own process (the
sources with ``EDGEWAY_PURE=1``), best of ``--repeat`` runs of ``--count`` each, alternating.

Run from the repository root:  python -m bench.cores_bench [--count N] [--repeat N]
The compiled side needs an install that compiled them (``scripts/test`` or ``scripts/serve``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUEST = (b"GET / HTTP/1.1\r\nHost: ce7a1aba0d5b.edgeway.localhost:28590\r\nUser-Agent: wrk"
           b"\r\nAccept: */*\r\n\r\n")
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: Sun, 29 Nov 2026 08:00:00"
            b" GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 13"
            b"\r\n\r\nhello, world\n")


def http_exchange(count: int) -> float:
    """µs per exchange through the edge's HTTP/1.1 cores."""
    from edgeway.edge.h1 import Request, RequestParser, end_to_end, head
    from edgeway.edge.h1_response import ResponseParser
    requests, responses = RequestParser(), ResponseParser()
    started = time.perf_counter()
    for _ in range(count):
        requests.feed(REQUEST)
        req = requests.next_event()
        assert isinstance(req, Request)
        requests.next_event()
        head(b"GET / HTTP/1.1\r\n", end_to_end(req.headers))
        responses.expect(False)
        responses.feed(RESPONSE)
        resp = responses.next_event()
        responses.next_event()
        responses.next_event()
        head(b"HTTP/1.1 200 OK\r\n", end_to_end(getattr(resp, "headers", [])))
    return (time.perf_counter() - started) / count * 1e6


def mux_frame(count: int) -> float:
    """µs per DATA frame sent by one muxado session and received by another."""
    from edgeway.tunnel.muxado.session import Session
    client, server = Session(client=True), Session(client=False)
    stream = client.open_stream()
    started = time.perf_counter()
    for _ in range(count):
        client.send(stream, REQUEST)
        server.receive(client.data_to_send())
        client.receive(server.data_to_send())
    return (time.perf_counter() - started) / count * 1e6


def measure(count: int) -> None:
    """(The child's part: one line, ``<pure> <http µs> <mux µs>``.)"""
    from edgeway import native
    http, mux = http_exchange(count), mux_frame(count)
    print(native.PURE is not None, f"{http:.3f}", f"{mux:.3f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        measure(args.count)
        return 0
    best: dict[bool, tuple[float, float]] = {}
    for _ in range(args.repeat):
        for pure in (True, False):
            out = subprocess.run([sys.executable, "-m", "bench.cores_bench", "--child",
                                  "--count", str(args.count)], cwd=ROOT, check=True,
                                 capture_output=True, text=True,
                                 env={**os.environ, "EDGEWAY_PURE": "1" if pure else ""})
            was_pure, http, mux = out.stdout.split()
            if (was_pure == "True") != pure:
                print("the compiled cores are not installed (scripts/test or scripts/serve "
                      "compiles them)", file=sys.stderr)
                return 2
            old = best.get(pure, (float("inf"), float("inf")))
            best[pure] = (min(old[0], float(http)), min(old[1], float(mux)))
    (ph, pm), (ch, cm) = best[True], best[False]
    print(f"best of {args.repeat} runs of {args.count}\n")
    print("| core | pure µs | compiled µs | speed-up |\n|---|---:|---:|---:|")
    print(f"| HTTP/1.1 exchange (parse and write both heads) | {ph:.2f} | {ch:.2f} | "
          f"{ph / ch:.1f}x |")
    print(f"| muxado DATA frame (send, receive) | {pm:.2f} | {cm:.2f} | {pm / cm:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
