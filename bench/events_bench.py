"""Traffic events benchmark: requests/s through a tunnel (public HTTP listener -> muxado tunnel
-> the official ngrok SDK agent -> a Node upstream returning 13 bytes) without any event
subscription, then with an ``http_request_complete.v0`` subscription delivering every request's
event to a Datadog-intake stand-in (the HTTPS capture service of the tests, here in this
process), alternating the two so that drift in the machine's load hits both alike. The target:
the subscription costs under 10% of the requests/s. Each "with" run also checks what arrived:
the events delivered (read back from the stand-in), dropped and left over, against the number
of requests wrk made.

Run from the repository root:  python -m bench.events_bench [--duration S] [--rounds N]
Needs wrk, Node and the ngrok SDK (as bench/edge_bench.py). Exit status 0 whether or not the
target is met; 1 if the benchmark failed; 2 if a tool is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.api_bench import BenchError, Result, note, pin, run_wrk  # noqa: E402
from bench.common import Children  # noqa: E402
from bench.edge_bench import Agent, port_of, probe, upstream  # noqa: E402
from tests.events import capture  # noqa: E402
from tests.events.capture import DD_KEY, Capture  # noqa: E402
from tests.server import Server, start  # noqa: E402

CONNS = (64, 1)


def events_of(cap: Capture) -> int:
    return sum(len(r.json()) for r in cap.of("/api/v2/logs", 202))


def run(tmp: Path, args: argparse.Namespace) -> dict[tuple[str, int], list[Result]]:
    children = Children(tmp, args.server_cpus)
    results: dict[tuple[str, int], list[Result]] = {}
    server: Server | None = None
    with capture.running(tmp) as cap:
        cap.parse = False  # (what arrived is read after each run, not during it)
        try:
            http_up, _pid = upstream(children, "http")
            server = start(tmp / "edgeway", None, "--events-datadog-url", cap.url,
                           "--events-ca-file", str(cap.ca_file))
            pin(server.proc.pid, args.server_cpus)
            with server.client() as api:
                token = api.post("/credentials", json={}).json()["token"]
                dest = api.post("/event_destinations", json={"target": {"monitoring": {
                    "api_key": DD_KEY, "tags": "bench:events"}}}).json()
            agent = Agent(children, "agent", server, token)
            url = agent.bind("http", f"http://127.0.0.1:{http_up}")[0]
            if port_of(url) != server.http_port:
                raise BenchError(f"HTTP tunnel URL {url} is not on the public HTTP port")
            base, host = f"http://127.0.0.1:{server.http_port}/", urlsplit(url).netloc
            probe(base, host)
            sub = ""
            for rnd in range(args.rounds):
                for mode in ("without", "with"):
                    with server.client() as api:
                        if mode == "with":
                            sub = api.post("/event_subscriptions", json={
                                "sources": [{"type": "http_request_complete.v0"}],
                                "destination_ids": [dest["id"]]}).json()["id"]
                            time.sleep(1.0)  # (the sink loads it within a tick)
                        elif sub:
                            api.delete(f"/event_subscriptions/{sub}")
                            sub = ""
                            time.sleep(1.0)
                    for conns in CONNS:
                        before = events_of(cap)
                        res = run_wrk(base, _script(tmp, host), server.proc.pid,
                                      argparse.Namespace(**{**vars(args),
                                                            "connections": conns,
                                                            "repeat": 1}))
                        results.setdefault((mode, conns), []).append(res)
                        note(f"[round {rnd + 1}] {mode} subscription, -c{conns}: "
                             f"{res.rps:,.0f} req/s, p50 {res.p50:.3f} ms, p99 {res.p99:.3f} "
                             f"ms, server {res.cpu_us:.0f} µs/req")
                        if mode == "with":
                            _check(cap, server, dest["id"], before)
        finally:
            children.stop_all()
            if server is not None:
                server.stop()
    return results


def _script(tmp: Path, host: str) -> Path:
    script = tmp / "host.lua"
    script.write_text(f'wrk.headers["Host"] = "{host}"\n')
    return script


def _check(cap: Capture, server: Server, dest: str, before: int) -> None:
    """Every request of the run (warm-up included) has its event delivered, or counted as
    dropped, once the backlog is gone."""
    deadline = time.monotonic() + 30
    last = -1
    while time.monotonic() < deadline:
        now = events_of(cap)
        if now == last:
            break
        last = now
        time.sleep(1.0)
    with server.client() as api:
        state = api.get(f"/event_destinations/{dest}").json()["delivery"]
    note(f"    events delivered in this run: {last - before:,}; destination totals: "
         f"delivered {state['delivered']:,}, dropped {state['dropped']:,}, dead letters "
         f"{state['dead_letters']:,}")


def report(results: dict[tuple[str, int], list[Result]]) -> None:
    """Medians of the runs (and the best req/s): other load on the machine moves single
    runs a lot, and hits both modes alike over alternating rounds."""
    print("| subscription | connections | req/s median (best) | p50 ms | p99 ms "
          "| server CPU µs/req median |")
    print("|---|---:|---:|---:|---:|---:|")
    med: dict[tuple[str, int], tuple[float, float]] = {}
    for (mode, conns), runs in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rps, cpu = median(r.rps for r in runs), median(r.cpu_us for r in runs)
        med[mode, conns] = rps, cpu
        print(f"| {mode} | {conns} | {rps:,.0f} ({max(r.rps for r in runs):,.0f}) "
              f"| {median(r.p50 for r in runs):.3f} | {median(r.p99 for r in runs):.3f} "
              f"| {cpu:.0f} |")
    print("\nTargets (the cost: one minus the ratio of the medians; and the median of each "
          "round's ratio, its two runs made back to back):")
    for conns in CONNS:
        w, wo = med.get(("with", conns)), med.get(("without", conns))
        if w and wo:
            cost = 1 - w[0] / wo[0]
            paired = 1 - median(a.rps / b.rps for a, b in zip(
                results["with", conns], results["without", conns], strict=True))
            verdict = "PASS" if cost < 0.10 else "FAIL"
            print(f"- {verdict}: an http_request_complete.v0 subscription costs < 10% of the "
                  f"requests/s at {conns} connection(s): {cost:+.1%} (median {w[0]:,.0f} vs "
                  f"{wo[0]:,.0f} req/s; by rounds {paired:+.1%}); server CPU per request "
                  f"{w[1] / wo[1] - 1:+.1%} ({w[1]:.0f} vs {wo[1]:.0f} µs)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=4, help="seconds per measured wrk run")
    p.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per wrk run")
    p.add_argument("--rounds", type=int, default=4,
                   help="alternations of without/with (medians are compared)")
    p.add_argument("--no-pin", action="store_true",
                   help="do not pin the server side to one CPU and wrk to another")
    args = p.parse_args()
    missing = [tool for tool in ("wrk", "node") if shutil.which(tool) is None]
    if importlib.util.find_spec("ngrok") is None:
        missing.append("the ngrok SDK (pip install --ignore-requires-python ngrok==1.7.0)")
    if missing:
        note(f"events_bench needs {', '.join(missing)}")
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    pinned = not args.no_pin and len(cpus) >= 2
    args.server_cpus, args.wrk_cpus = ({cpus[-1]}, {cpus[0]}) if pinned else (None, None)
    t0, load = time.monotonic(), os.getloadavg()[0]
    try:
        if pinned:  # the capture service runs in this process: on wrk's CPU
            os.sched_setaffinity(0, args.wrk_cpus)
        with tempfile.TemporaryDirectory(prefix="edgeway-events-bench-") as tmp:
            results = run(Path(tmp), args)
    except (BenchError, RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        note(f"\nBENCHMARK FAILED: {exc}")
        return 1
    finally:
        os.sched_setaffinity(0, cpus)
    where = (f"server side (Edgeway, the SDK agent, the upstream) on CPU {cpus[-1]}, wrk and "
             f"the capture service on CPU {cpus[0]}" if pinned else "no CPU pinning")
    print(f"\nwrk -t1 --latency -d{args.duration}s (+{args.warmup}s warm-up) per run, "
          f"{args.rounds} rounds; {where}; {time.monotonic() - t0:.0f}s in all; load average "
          f"{load:.2f} at start, {os.getloadavg()[0]:.2f} at end\n")
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
