"""The agent's HTTP tap alone (``edgeway.agent.inspect.Tap``), in process: a request and its
answer (a wrk-like GET and a 13-byte answer, as ``http_paths`` sends) fed to a tap again and
again, in the light mode (inspection off: the tunnel's metrics and the console's recent
requests) and with captures on, beside a bare llhttp parse of the same bytes (httptools, a
request parser and a response parser, no callbacks) measured in the same run. Prints the CPU
per exchange of each, and the ratios.

Run from the repository root:  python -m bench.tap_bench [--exchanges 200000] [--rounds 5]
(``EDGEWAY_PURE=1``: the pure-Python modules instead of the compiled ones.)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httptools  # noqa: E402

from edgeway import native  # noqa: E402
from edgeway.agent.captures import Exchange, Store  # noqa: E402
from edgeway.agent.inspect import Tap  # noqa: E402

REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: Mon, 07 Dec 2026 12:00:00 "
          b"GMT\r\nConnection: keep-alive\r\nContent-Length: 13\r\n\r\nHello, World!")


def per_exchange(run: Callable[[int], None], exchanges: int, rounds: int) -> float:
    """The least CPU (µs) per exchange over ``rounds`` runs of ``exchanges``."""
    best = float("inf")
    for _ in range(rounds):
        began = time.process_time()
        run(exchanges)
        best = min(best, (time.process_time() - began) / exchanges * 1e6)
    return best


def tapped(store: Store | None) -> Callable[[int], None]:
    recent: deque[tuple[str, Exchange]] = deque(maxlen=100)  # (the console's, as the agent)
    tap = Tap(store, "bench", "127.0.0.1:50000", "", lambda ex: recent.append(("bench", ex)))

    def run(n: int) -> None:
        request, response = tap.request, tap.response
        for _ in range(n):
            request(REQUEST)
            response(ANSWER)
        last = recent[-1][1].response
        assert not tap.stopped and last is not None and last.status_code == 200
    return run


def llhttp(n: int) -> None:
    class Nothing:
        pass

    requests, responses = httptools.HttpRequestParser(Nothing()), \
        httptools.HttpResponseParser(Nothing())
    for _ in range(n):
        requests.feed_data(REQUEST)
        responses.feed_data(ANSWER)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exchanges", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"modules: {'compiled' if native.PURE is None else 'pure (' + native.PURE + ')'}")
    base = per_exchange(llhttp, args.exchanges, args.rounds)
    light = per_exchange(tapped(None), args.exchanges, args.rounds)
    captured = per_exchange(tapped(Store(64 << 20)), args.exchanges, args.rounds)
    print(f"{'':28s} {'µs/exchange':>12s} {'x llhttp':>9s}")
    for name, value in (("llhttp parse (baseline)", base), ("tap, inspection off", light),
                        ("tap, captures on", captured)):
        print(f"{name:28s} {value:12.2f} {value / base:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
