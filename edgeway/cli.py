"""``edgeway serve`` and ``edgeway api-keys create``. Every option also reads an
``EDGEWAY_*`` environment variable; the command line wins."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from edgeway import bootstrap, logs
from edgeway.catalog.model import Settings
from edgeway.config import (
    ServerConfig,
    cors_origins,
    default_data_dir,
    lowest_bindable_port,
    parse_addr,
    public_url_for,
    split_list,
)
from edgeway.store.db import DatabaseUnavailable, StoreUnavailable
from edgeway.store.migrate import open_database

DEFAULTS = Settings()


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"EDGEWAY_{name}", default)


def _store_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", type=Path, default=Path(_env("DATA_DIR") or default_data_dir()),
                   help="where the SQLite database lives (default: %(default)s)")
    p.add_argument("--database-url", default=_env("DATABASE_URL"),
                   help="postgresql://user@host:port/db to use PostgreSQL instead of SQLite")


def default_agent_config() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "edgeway" / "agent.yml"


def _config_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action="append", default=[], metavar="FILE[,FILE]",
                   help="config file(s), merged in order; repeatable or comma-separated "
                        f"(default: {default_agent_config()})")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="edgeway", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the platform")
    _store_options(serve)
    serve.add_argument("--api-addr", default=_env("API_ADDR", "127.0.0.1:8080"),
                       help="management API listen address (default: %(default)s)")
    serve.add_argument("--api-cors-origins", default=_env("API_CORS_ORIGINS", ""),
                       metavar="ORIGIN[,ORIGIN]",
                       help="web origins (scheme://host[:port], or *) whose pages may call the "
                            "management API from a browser (default: none)")
    serve.add_argument("--public-url", default=_env("PUBLIC_URL"),
                       help="base of every uri member (default: http://<api-addr>)")
    serve.add_argument("--base-domain", default=_env("BASE_DOMAIN", DEFAULTS.base_domain),
                       help="the platform's own domain (default: %(default)s)")
    serve.add_argument("--regions", default=_env("REGIONS", ",".join(DEFAULTS.regions)),
                       help="comma-separated region codes (default: %(default)s)")
    serve.add_argument("--name-servers", default=_env("NAME_SERVERS", ""),
                       help="comma-separated NS targets for agent ingresses "
                            "(default: ns1..ns4.<base-domain>)")
    serve.add_argument("--tunnel-addr", default=_env("TUNNEL_ADDR", "127.0.0.1:4443"),
                       help="TLS listener agents dial (default: %(default)s)")
    serve.add_argument("--tunnel-hostnames", default=_env("TUNNEL_HOSTNAMES", ""),
                       help="extra names and addresses agents dial, for the tunnel "
                            "certificate (always: localhost, 127.0.0.1, ::1, tunnel.<base>)")
    serve.add_argument("--tunnel-cert", type=Path, default=_env("TUNNEL_CERT"),
                       help="PEM certificate chain for the tunnel listener, instead of one "
                            "from the platform CA (with --tunnel-key)")
    serve.add_argument("--tunnel-key", type=Path, default=_env("TUNNEL_KEY"),
                       help="PEM private key of --tunnel-cert")
    serve.add_argument("--agent-client-cas", default=_env("AGENT_CLIENT_CAS", ""),
                       metavar="CA_ID[,CA_ID]",
                       help="require agents to present a client certificate issued by one of "
                            "these certificate authorities (ids of /certificate_authorities)")
    serve.add_argument("--sns-cert-hosts", default=_env("SNS_CERT_HOSTS", ""), metavar="REGEX",
                       help="host names (a regular expression) SNS signing certificates may be "
                            "fetched from (default: sns.<region>.amazonaws.com[.cn])")
    serve.add_argument("--tcp-host", default=_env("TCP_HOST", "127.0.0.1"),
                       help="address TCP tunnels listen on and are published as "
                            "(default: %(default)s)")
    serve.add_argument("--tcp-ports", default=_env("TCP_PORTS", "20000-20999"),
                       help="port range for TCP tunnels (default: %(default)s)")
    serve.add_argument("--tcp-grace", type=float, default=float(_env("TCP_GRACE") or 120),
                       metavar="SECONDS",
                       help="how long a TCP tunnel whose agent dropped keeps its port for the "
                            "agent's reconnect (default: %(default)g)")
    serve.add_argument("--http-addr", default=_env("HTTP_ADDR", "127.0.0.1:8880"),
                       help="public HTTP listener, or 'off' (default: %(default)s)")
    serve.add_argument("--https-addr", default=_env("HTTPS_ADDR", "127.0.0.1:8443"),
                       help="public HTTPS and TLS listener, or 'off' (default: %(default)s)")
    serve.add_argument("--reuse-port", action="store_true",
                       default=_env("REUSE_PORT", "") not in ("", "0", "false"),
                       help="listen with SO_REUSEPORT, so a new server can start on the same "
                            "ports before the old one stops (rolling restarts)")
    ca = sub.add_parser("ca", help="the platform CA that agents trust")
    ca_sub = ca.add_subparsers(dest="action", required=True)
    export = ca_sub.add_parser("export", help="print the CA certificate (PEM)")
    export.add_argument("--data-dir", type=Path,
                        default=Path(_env("DATA_DIR") or default_data_dir()))
    agent = sub.add_parser("agent", help="the Edgeway agent: expose local services")
    agent_sub = agent.add_subparsers(dest="action", required=True)
    start = agent_sub.add_parser("start", help="connect and start tunnels from the config")
    start.add_argument("names", nargs="*", metavar="NAME", help="tunnels to start")
    which = start.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="start every tunnel in the config")
    which.add_argument("--none", action="store_true",
                       help="start no tunnel (use the local API to start them)")
    _config_option(start)
    start.add_argument("--log", action="store_true",
                       help="structured log lines instead of the console screen")
    start.add_argument("--resolve", action="append", default=[], metavar="HOST:ADDRESS",
                       help="dial ADDRESS for server_addr's HOST (TLS still checks HOST); "
                            "repeatable")
    config = agent_sub.add_parser("config", help="agent config files")
    config_sub = config.add_subparsers(dest="config_action", required=True)
    check = config_sub.add_parser("check", help="validate and print the merged config")
    _config_option(check)
    keys = sub.add_parser("api-keys", help="manage API keys from the command line")
    keys_sub = keys.add_subparsers(dest="action", required=True)
    create = keys_sub.add_parser("create", help="create an API key and print its token")
    create.add_argument("--description", default="created with edgeway api-keys create")
    create.add_argument("--role", choices=("admin", "operator", "read_only"), default="admin",
                        help="admin: everything; operator: all but API keys, bot users and "
                             "the API's IP restrictions; read_only: reads (default: admin)")
    _store_options(create)
    return top


def _regex(option: str, text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"{option} {text!r} is not a regular expression: {exc}") from None
    return text


def server_config(args: argparse.Namespace) -> ServerConfig:
    host, port = parse_addr(args.api_addr)
    regions = split_list(args.regions)
    if not regions:
        raise ValueError("--regions needs at least one region code")
    settings = Settings(
        public_url=(args.public_url or public_url_for(host, port)).rstrip("/"),
        base_domain=args.base_domain.strip(".").lower(),
        regions=regions,
        name_servers=split_list(args.name_servers),
    )
    t_host, t_port = parse_addr(args.tunnel_addr)
    names = ("localhost", "127.0.0.1", "::1", f"tunnel.{settings.base_domain}", t_host,
             *split_list(args.tunnel_hostnames))
    names = tuple(n for n in dict.fromkeys(names) if n not in ("0.0.0.0", "::", ""))
    low, sep, high = args.tcp_ports.partition("-")
    if not (sep and low.isascii() and low.isdigit() and high.isascii() and high.isdigit()
            and 1 <= int(low) <= int(high) <= 65535):
        raise ValueError(f"--tcp-ports {args.tcp_ports!r} must be LOW-HIGH within 1-65535")
    if not 0 <= args.tcp_grace <= 86400:
        raise ValueError(f"--tcp-grace {args.tcp_grace:g} must be 0 to 86400 seconds")
    if (args.tunnel_cert is None) != (args.tunnel_key is None):
        raise ValueError("--tunnel-cert and --tunnel-key go together")
    for path in (args.tunnel_cert, args.tunnel_key):
        if path is not None and not Path(path).is_file():
            raise ValueError(f"{path}: no such file")

    def public(addr: str) -> tuple[str, int] | None:
        return None if addr.strip().lower() == "off" else parse_addr(addr)

    own = [(port, "management API"), (t_port, "tunnel listener")]
    for what, addr in (("public HTTP listener", public(args.http_addr)),
                       ("public HTTPS listener", public(args.https_addr))):
        if addr is not None:
            own.append((addr[1], what))
    agent_cas = split_list(args.agent_client_cas)
    for ca in agent_cas:
        if not ca.startswith("ca_"):
            raise ValueError(f"--agent-client-cas: {ca!r} is not a certificate authority id "
                             "(ca_...)")
    settings = dataclasses.replace(settings, own_ports=tuple(own), agent_client_cas=agent_cas,
                                   agent_ports=(int(low), int(high)),
                                   lowest_port=lowest_bindable_port())
    return ServerConfig(args.data_dir, args.database_url, host, port, settings, t_host, t_port,
                        names, args.tcp_host, (int(low), int(high)), tcp_grace=args.tcp_grace,
                        http_addr=public(args.http_addr), https_addr=public(args.https_addr),
                        reuse_port=args.reuse_port,
                        cors_origins=cors_origins(split_list(args.api_cors_origins)),
                        sns_cert_hosts=_regex("--sns-cert-hosts", args.sns_cert_hosts),
                        tunnel_cert=(Path(args.tunnel_cert), Path(args.tunnel_key))
                        if args.tunnel_cert else None)


def _ca_export(args: argparse.Namespace) -> None:
    from edgeway.pki import platform_ca, seal

    print(platform_ca.ca_pem(args.data_dir, seal.load(args.data_dir)).read_text(), end="")


async def _api_key(args: argparse.Namespace) -> None:
    db = await open_database(args.database_url, args.data_dir)
    try:
        print(await bootstrap.create_api_key(db, args.description, args.role))
    finally:
        await db.close()


def _agent(args: argparse.Namespace) -> None:
    from edgeway.agent import config as agent_config

    paths = agent_config.split_paths(args.config) or [str(default_agent_config())]
    try:
        cfg, doc = agent_config.load_merged(paths)
        if args.action == "config":
            print(agent_config.to_yaml(doc), end="")
            return
    except agent_config.ConfigError as exc:
        print(f"edgeway agent: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    names = list(cfg.tunnels) if args.all else [] if args.none else list(args.names)
    problems = [n for n in names if n not in cfg.tunnels]
    if problems:
        raise ValueError(f"no tunnel named {', '.join(problems)} in "
                         f"{', '.join(cfg.files)} (defined: {', '.join(cfg.tunnels) or 'none'})")
    if not names and not (args.none or args.all):
        raise ValueError("name the tunnels to start, or pass --all or --none")
    if not cfg.authtoken or not cfg.server_addr:
        raise ValueError("the config needs authtoken and server_addr to start")
    resolve = {}
    for item in args.resolve:
        host, sep, address = item.rpartition(":")
        if not sep or not host or not address:
            raise ValueError(f"--resolve {item!r} must be HOST:ADDRESS")
        resolve[host] = address
    cfg.options.configure_logs()
    from edgeway.agent.run import run

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        refused = runner.run(run(cfg, names, resolve, args.log))
    if refused:
        print(f"edgeway agent: {refused}", file=sys.stderr)
        raise SystemExit(1)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when it is installed (it comes with uvicorn[standard]), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    logs.configure()
    try:
        if args.command == "serve":
            from edgeway.server import serve
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                runner.run(serve(server_config(args)))
        elif args.command == "ca":
            _ca_export(args)
        elif args.command == "agent":
            _agent(args)
        else:
            asyncio.run(_api_key(args))
    # (SealError is a ValueError; DatabaseUnavailable: the database went while starting)
    except (ValueError, OSError, StoreUnavailable, DatabaseUnavailable) as exc:
        print(f"edgeway: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        pass
