"""``edgeway serve``: open the store, bootstrap, run the API until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import uvicorn

from edgeway import bootstrap, ids
from edgeway.api.app import build
from edgeway.api.platform import Platform
from edgeway.config import ServerConfig
from edgeway.pki import platform_ca, seal
from edgeway.store.migrate import open_database
from edgeway.tunnel.server import TunnelServer

log = logging.getLogger("edgeway")


def node_id(data_dir: Path) -> str:
    """This node's id, kept in the data directory: several nodes may share one database."""
    path = data_dir / "node.id"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(ids.new_id("node") + "\n")
    return path.read_text().strip()


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGINT/SIGTERM after shutting down, so the process would die by the
    signal; we stop on them ourselves and exit 0 after a clean shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop, sig)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _stop(self, sig: signal.Signals) -> None:
        log.info('{"event": "signal", "signal": "%s"}', sig.name)
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


async def serve(cfg: ServerConfig) -> None:
    db = await open_database(cfg.database_url, cfg.data_dir)
    try:
        token = await bootstrap.first_start(db)
        if token:
            print(f"First start: created an admin API key. It is shown only this once:\n"
                  f"  {token}", flush=True)
        sealer = seal.load(cfg.data_dir)
        platform = Platform(cfg.settings, db, sealer)
        tunnels = TunnelServer(platform, platform_ca.ensure(cfg.data_dir, sealer,
                                                            list(cfg.tunnel_names)),
                               cfg.tcp_host, cfg.tcp_ports, node_id(cfg.data_dir))
        await tunnels.start(cfg.tunnel_host, cfg.tunnel_port)
        platform.agents = tunnels
        config = uvicorn.Config(build(platform), host=cfg.api_host, port=cfg.api_port,
                                log_config=None, access_log=False, lifespan="off",
                                server_header=False)
        server = _Server(config)
        where = "SQLite " + str(cfg.data_dir / "edgeway.db") if not cfg.database_url \
            else "PostgreSQL"
        log.info('{"event": "start", "api": "%s", "tunnel": "%s:%d", "store": "%s"}',
                 cfg.settings.public_url, cfg.tunnel_host, cfg.tunnel_port, where)
        try:
            await server.serve()
        finally:
            await tunnels.stop()
    finally:
        await db.close()
        log.info('{"event": "stopped"}')
