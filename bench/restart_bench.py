"""Restart benchmark: a plain restart of ``edgeway serve`` (stop, start the command again,
every import cold), as a person or a service manager does it, with the official Python SDK's
agent connected. Medians over --rounds restarts of:

- the tunnel port taken again (a TCP connect succeeds): the listeners are bound before the
  imports (``edgeway.early``);
- the server up (its API answers);
- the agent back: a request through its tunnel answers again. The SDKs try again 50 ms and
  2.5 s after a drop, then only two minutes on: an agent that misses the second try is back
  after some 125 s.

Also, for comparison, the same restart with the early binding off (``EDGEWAY_REUSE_PORT=1``
turns it off: a rolling restart must not take connections it cannot serve yet).

Run from the repository root, on a quiet machine:  python -m bench.restart_bench [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests import forkserver  # noqa: E402
from tests.edge.agents import EdgeClient, agent  # noqa: E402
from tests.edge.upstream import running  # noqa: E402
from tests.server import Server, start  # noqa: E402

GIVE_UP = 150.0  # seconds: past the SDKs' third try


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 0.2).close()
        return True
    except OSError:
        return False


def restart(srv: Server, url: str, env: dict[str, str]) -> tuple[Server, float, float, float]:
    """Stop ``srv``, start it again: (the new server, seconds until its tunnel port takes a
    connection, until its API answers, until the agent's tunnel answers)."""
    assert srv.stop() == 0
    t0 = time.monotonic()
    ports = (int(srv.base_url.rsplit(":", 1)[1]), srv.tunnel_port, srv.http_port,
             srv.https_port)
    bound = 0.0
    # (start() returns once the API answers; the tunnel port is watched meanwhile)
    def watch() -> None:
        nonlocal bound
        while not _connects(srv.tunnel_port):
            time.sleep(0.005)
        bound = time.monotonic() - t0

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    again = start(srv.data_dir, srv.database_url, token=srv.token, ports=ports, env=env)
    up = time.monotonic() - t0
    watcher.join(GIVE_UP)
    with EdgeClient(again, timeout=5) as web:
        while time.monotonic() - t0 < GIVE_UP:
            try:
                if web.get(url + "/b").text == "svc /b":
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
    return again, bound, up, time.monotonic() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--without-early", type=int, default=1,
                   help="rounds with the early binding off (each may take two minutes)")
    args = p.parse_args()
    forkserver.FORK = False  # (every start a new process, nothing imported)
    with tempfile.TemporaryDirectory() as tmp, running("svc") as svc:
        srv = start(Path(tmp) / "srv")
        with srv.client() as api:
            token = api.post("/credentials", json={}).json()["token"]
        a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{svc}",
                               "domain": "restart.edgeway.localhost"})
        try:
            for label, env, rounds in (("early binding (default)", {}, args.rounds),
                                       ("early binding off", {"EDGEWAY_REUSE_PORT": "1"},
                                        args.without_early)):
                figures = []
                for _ in range(rounds):
                    srv, bound, up, back = restart(srv, a.urls[0], {**os.environ, **env})
                    figures.append((bound, up, back))
                if not figures:
                    continue
                med = [statistics.median(f[i] for f in figures) for i in range(3)]
                print(f"{label}: {rounds} restarts, medians: tunnel port taken "
                      f"{med[0]:.2f} s, server up {med[1]:.2f} s, agent back {med[2]:.2f} s")
        finally:
            a.stop()
            srv.stop()


if __name__ == "__main__":
    main()
