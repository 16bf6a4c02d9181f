"""``edgeway serve --workers N``: every core of one machine. This process prepares the shared
state once (the database migrated and bootstrapped, the admin key printed, the platform CA
stored for the cluster, the secret key), then runs N ``edgeway serve`` processes with the
same options on the same ports (SO_REUSEPORT: the kernel spreads connections over them),
each a node of one cluster with a data directory of its own (``<data dir>/workers/<i>``) and
a node link on a Unix socket there (or at PORT+i of ``--node-addr HOST:PORT``, for the other
machines of a cluster). A public connection accepted by a worker that does not hold the
tunnel's agent is handed, as the socket itself, to the one that does
(``edgeway.nodes.handoff``), or travels there over that link when no one worker holds every
tunnel it may reach (``edgeway.nodes``).

A worker that dies is started again (after 1 s, doubling to 30 s while it keeps dying);
SIGTERM/SIGINT are passed on to every worker, and this process exits 0 when they all did."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import structlog

from edgeway import bootstrap, datadir, logs
from edgeway.config import ServerConfig, parse_addr
from edgeway.nodes import ca
from edgeway.pki import seal
from edgeway.store.migrate import open_database

log = structlog.get_logger()
BACKOFF_MAX = 30.0


def worker_args(argv: list[str], cfg: ServerConfig, index: int) -> list[str]:
    """A worker's command line: this one's, as one node of the cluster (later options win)."""
    own = cfg.data_dir / "workers" / str(index)
    if cfg.nodes.addr is None:
        link = f"unix:{own.resolve()}/link.sock"
    else:
        host, port = parse_addr(cfg.nodes.addr)
        link = f"{host}:{port + index}"
    return [sys.executable, "-m", "edgeway", *argv, "--workers", "1", "--reuse-port",
            "--data-dir", str(own), "--node-addr", link]


async def _prepare(cfg: ServerConfig) -> str:
    """The shared state, once; the secret key the workers get."""
    datadir.prepare(cfg.data_dir)
    key = seal.key_text(cfg.data_dir)
    db = await open_database(cfg.database_url, cfg.data_dir)
    try:
        await bootstrap.announce_first_start(db)
        await ca.share(db, cfg.data_dir, seal.load(cfg.data_dir))
    finally:
        await db.close()
    return key


class _Worker:
    def __init__(self, index: int, args: list[str], env: dict[str, str]) -> None:
        self.index, self.args, self.env = index, args, env
        self.proc: asyncio.subprocess.Process | None = None

    async def run(self, stopping: asyncio.Event) -> int:
        backoff = 1.0
        while True:
            self.proc = await asyncio.create_subprocess_exec(*self.args, env=self.env)
            log.info("worker_started", worker=self.index, pid=self.proc.pid)
            code = await self.proc.wait()
            if stopping.is_set():
                return code
            log.error("worker_died", worker=self.index, code=code, restart_in=backoff)
            try:
                await asyncio.wait_for(stopping.wait(), backoff)
                return code
            except TimeoutError:
                backoff = min(backoff * 2, BACKOFF_MAX)

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(sig)


async def supervise(cfg: ServerConfig, argv: list[str]) -> int:
    """Run the workers until a signal; the exit code (0: every worker stopped cleanly)."""
    env = {**os.environ, seal.ENV: await _prepare(cfg)}
    for i in range(cfg.nodes.workers):
        (cfg.data_dir / "workers" / str(i)).mkdir(parents=True, exist_ok=True, mode=0o700)
    workers = [_Worker(i, worker_args(argv, cfg, i), env) for i in range(cfg.nodes.workers)]
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stop(sig: signal.Signals) -> None:
        log.info("signal", signal=sig.name, workers=len(workers))
        stopping.set()
        for worker in workers:
            worker.signal(signal.SIGTERM)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig)
    log.info("workers_start", workers=len(workers), store="PostgreSQL")
    codes = await asyncio.gather(*(w.run(stopping) for w in workers))
    logs.report_suppressed()
    log.info("workers_stopped", codes=list(codes))
    return 0 if all(code == 0 for code in codes) else 1
