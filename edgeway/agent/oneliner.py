"""The one-liners' flags (``edgeway http|tcp|tls ADDR …``) and the session flags every agent
command shares (``--authtoken``, ``--server-addr``, ``--log``…), turned into the config
document they stand for: the command line's document, merged after the config files and
checked by the same code as a config file (so a one-liner accepts exactly what a config
tunnel accepts, and its errors name the key: ``the command line: tunnels.http-3000.…``).
The flags follow the ngrok agent's where one exists."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from edgeway.agent.config import default_config
from edgeway.agent.settings import LOG_FORMATS, LOG_LEVELS

_SESSION = {"authtoken": "authtoken", "server_addr": "server_addr", "root_cas": "root_cas",
            "log": "log", "log_format": "log_format", "log_level": "log_level",
            "region": "region", "web_addr": "web_addr"}


def session_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action="append", default=[], metavar="FILE[,FILE]",
                   help="config file(s), merged in order; repeatable or comma-separated "
                        f"(default: {default_config()}, when it exists)")
    p.add_argument("--authtoken", help="the credential's token (instead of the config's)")
    p.add_argument("--server-addr", metavar="HOST:PORT", help="the server's tunnel listener")
    p.add_argument("--root-cas", metavar="FILE|host|trusted",
                   help="CA certificates the server's certificate must chain to")
    p.add_argument("--region", help="dial tunnel.REGION.<server_addr host>")
    p.add_argument("--web-addr", metavar="HOST:PORT|false",
                   help="the local API and web inspector (default 127.0.0.1:4040; port 0: "
                        "a free one, shown on the console and in the log)")
    p.add_argument("--log", metavar="stdout|stderr|false|FILE",
                   help="where log lines go (stdout turns the console off)")
    p.add_argument("--log-format", choices=LOG_FORMATS, help="json, logfmt or term")
    p.add_argument("--log-level", choices=tuple(LOG_LEVELS), help="the least severe level")
    p.add_argument("--resolve", action="append", default=[], metavar="HOST:ADDRESS",
                   help="dial ADDRESS for server_addr's HOST (TLS still checks HOST); also "
                        "curl's HOST:PORT:ADDRESS; repeatable")


def _common(p: argparse.ArgumentParser, url_help: str) -> None:
    p.add_argument("--url", "--domain", dest="url", help=url_help)
    p.add_argument("--name", help="the tunnel's name (default: PROTO-ADDR)")
    p.add_argument("--metadata", help="the tunnel's metadata")
    p.add_argument("--label", action="append", default=[], metavar="NAME=VALUE",
                   help="bind a labeled tunnel for edges instead (repeatable)")
    p.add_argument("--cidr-allow", action="append", default=[], metavar="CIDR",
                   help="allow only these client addresses (repeatable)")
    p.add_argument("--cidr-deny", action="append", default=[], metavar="CIDR",
                   help="refuse these client addresses (repeatable)")
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help="publish the agent's own API (web_addr) without any login or address "
                        "restriction")


def _http(p: argparse.ArgumentParser) -> None:
    add = p.add_argument
    add("--basic-auth", action="append", default=[], metavar="USER:PASSWORD",
        help="require HTTP basic auth (repeatable; passwords of 8 characters or more)")
    add("--oauth", metavar="PROVIDER", help="log visitors in with this OAuth provider")
    add("--oauth-client-id", metavar="ID",
        help="your own OAuth application's client id (with --oauth-client-secret; default: "
             "the platform's application)")
    add("--oauth-client-secret", metavar="SECRET",
        help="your own OAuth application's client secret (with --oauth-client-id)")
    add("--oauth-scope", action="append", default=[], metavar="SCOPE",
        help="an OAuth scope to ask for (repeatable)")
    add("--oauth-allow-email", action="append", default=[], metavar="EMAIL",
        help="let in only this e-mail address (repeatable; with --oauth-allow-domain: "
             "either)")
    add("--oauth-allow-domain", action="append", default=[], metavar="DOMAIN",
        help="let in only e-mail addresses of this domain (repeatable)")
    add("--oidc", metavar="ISSUER_URL", help="log visitors in with this OpenID provider")
    add("--oidc-client-id", metavar="ID",
        help="the client id registered with the OpenID provider (required with --oidc)")
    add("--oidc-client-secret", metavar="SECRET",
        help="the client secret registered with the OpenID provider (required with --oidc)")
    add("--oidc-scope", action="append", default=[], metavar="SCOPE",
        help="an OpenID scope to ask for besides openid (repeatable)")
    add("--oidc-allow-email", action="append", default=[], metavar="EMAIL",
        help="let in only this e-mail address (repeatable; with --oidc-allow-domain: "
             "either)")
    add("--oidc-allow-domain", action="append", default=[], metavar="DOMAIN",
        help="let in only e-mail addresses of this domain (repeatable)")
    add("--verify-webhook", metavar="PROVIDER", help="verify the sender's webhook signatures")
    add("--verify-webhook-secret", metavar="SECRET",
        help="the secret the provider signs its webhooks with (with --verify-webhook)")
    add("--circuit-breaker", type=float, metavar="RATIO",
        help="reject requests while this share of answers are 5xx")
    add("--compression", action="store_true", help="gzip answers at the edge")
    add("--request-header-add", action="append", default=[], metavar="'NAME: VALUE'",
        help="add this header to requests to the local service (repeatable)")
    add("--request-header-remove", action="append", default=[], metavar="NAME",
        help="remove this header from requests to the local service (repeatable)")
    add("--response-header-add", action="append", default=[], metavar="'NAME: VALUE'",
        help="add this header to the answers visitors get (repeatable)")
    add("--response-header-remove", action="append", default=[], metavar="NAME",
        help="remove this header from the answers visitors get (repeatable)")
    add("--ua-filter-allow", action="append", default=[], metavar="REGEX",
        help="let in only visitors whose User-Agent matches (repeatable)")
    add("--ua-filter-deny", action="append", default=[], metavar="REGEX",
        help="refuse visitors whose User-Agent matches (repeatable)")
    add("--host-header", metavar="rewrite|HOST",
        help="the Host the local service gets: rewrite (its own address) or a value")
    add("--scheme", action="append", default=[], choices=("http", "https"),
        help="public schemes (repeatable; default https)")
    add("--websocket-tcp-converter", action="store_true",
        help="turn WebSocket messages into a TCP stream to the local service")
    add("--inspect", choices=("true", "false"), help="capture requests (default true)")
    add("--traffic-policy-file", metavar="FILE", help="a traffic policy (YAML or JSON)")


def add_oneliners(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for proto, what, url_help in (
            ("http", "expose a local HTTP service: edgeway http 3000",
             "the public URL or domain (a reserved domain); default: a generated name"),
            ("tcp", "expose a local TCP service: edgeway tcp 22",
             "tcp://HOST:PORT, a reserved address; default: a port of the server's range"),
            ("tls", "expose a local TLS service (passed through, or terminated at the edge with "
                    "--crt and --key): edgeway tls 8443",
             "the public domain (a reserved domain); default: a generated name")):
        p = sub.add_parser(proto, help=what, description=what)
        p.add_argument("addr", metavar="PORT|ADDR|URL" if proto == "http" else "PORT|ADDR",
                       help="the local service: a port, host:port" +
                            (" or URL (https://… for a TLS service)" if proto == "http" else ""))
        _common(p, url_help)
        if proto in ("http", "tls"):
            p.add_argument("--mutual-tls-cas", metavar="FILE",
                           help="require visitors' client certificates issued by these CAs "
                                "(PEM; on tls, with --crt and --key)")
        if proto == "http":
            _http(p)
        elif proto == "tls":
            p.add_argument("--crt", metavar="FILE",
                           help="terminate TLS at the edge with this certificate (PEM chain; "
                                "with --key): the local service gets plain TCP")
            p.add_argument("--key", metavar="FILE",
                           help="the private key of --crt (PEM, unencrypted)")
            p.add_argument("--terminate-at", choices=("edge", "agent"),
                           help="where TLS is terminated with --crt and --key: edge (the "
                                "default; agent is not supported)")
        elif proto == "tcp":
            p.add_argument("--remote-addr", metavar="HOST:PORT",
                           help="a reserved address (same as --url tcp://HOST:PORT)")
            p.add_argument("--traffic-policy-file", metavar="FILE",
                           help="a traffic policy (YAML or JSON)")
        session_flags(p)


def session_doc(args: argparse.Namespace) -> dict[str, Any]:
    """The session flags that were given, as config keys."""
    doc = {key: getattr(args, attr) for attr, key in _SESSION.items()
           if getattr(args, attr, None) is not None}
    if doc.get("web_addr") == "false":
        doc["web_addr"] = False
    return doc


def tunnel_name(args: argparse.Namespace) -> str:
    return args.name or re.sub(r"[^A-Za-z0-9_.-]", "_", f"{args.command}-{args.addr}")


def _url(doc: dict[str, Any], proto: str, url: str) -> None:
    parts = urlsplit(url if "://" in url else f"//{url}")
    if proto == "tcp":
        if parts.scheme not in ("tcp", "") or not parts.port:
            raise ValueError(f"--url {url}: a TCP tunnel's URL is tcp://HOST:PORT")
        doc["remote_addr"] = parts.netloc
        return
    allowed = ("http", "https", "") if proto == "http" else ("tls", "")
    if parts.scheme not in allowed or parts.port or parts.path not in ("", "/") or \
            not parts.hostname:
        raise ValueError(f"--url {url}: must be a domain or {'/'.join(filter(None, allowed))}"
                         "://DOMAIN, without port or path (the server chooses the port)")
    doc["domain"] = parts.hostname
    if proto == "http" and parts.scheme and "schemes" not in doc:
        doc["schemes"] = [parts.scheme]


def _policy(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--traffic-policy-file {path}: cannot be read: {exc}") from None


def _login(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for flag in ("client_id", "client_secret"):
        if (value := getattr(args, f"{kind}_{flag}")) is not None:
            doc[flag] = value
    for flag, key in (("scope", "scopes"), ("allow_email", "allow_emails"),
                      ("allow_domain", "allow_domains")):
        if values := getattr(args, f"{kind}_{flag}"):
            doc[key] = values
    return doc


def _http_doc(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if args.scheme:
        doc["schemes"] = args.scheme
    if args.basic_auth:
        doc["basic_auth"] = args.basic_auth
    if args.oauth is not None:
        doc["oauth"] = {"provider": args.oauth, **_login(args, "oauth")}
    if args.oidc is not None:
        doc["oidc"] = {"issuer_url": args.oidc, **_login(args, "oidc")}
    if args.verify_webhook is not None:
        doc["verify_webhook"] = {"provider": args.verify_webhook,
                                 "secret": args.verify_webhook_secret or ""}
    if args.circuit_breaker is not None:
        doc["circuit_breaker"] = args.circuit_breaker
    for key, add, remove in (("request_header", "request_header_add", "request_header_remove"),
                             ("response_header", "response_header_add",
                              "response_header_remove")):
        if getattr(args, add) or getattr(args, remove):
            doc[key] = {"add": getattr(args, add), "remove": getattr(args, remove)}
    if args.ua_filter_allow or args.ua_filter_deny:
        doc["user_agent_filter"] = {"allow": args.ua_filter_allow, "deny": args.ua_filter_deny}
    for flag in ("compression", "websocket_tcp_converter"):
        if getattr(args, flag):
            doc[flag] = True
    if args.host_header is not None:
        doc["host_header"] = args.host_header
    if args.inspect is not None:
        doc["inspect"] = args.inspect == "true"


def tunnel_doc(args: argparse.Namespace) -> dict[str, Any]:
    """A one-liner's tunnel, as a config tunnel definition."""
    proto = args.command
    doc: dict[str, Any] = {"addr": args.addr} if args.label else {"proto": proto,
                                                                  "addr": args.addr}
    if args.label:
        doc["labels"] = args.label
    if args.metadata is not None:
        doc["metadata"] = args.metadata
    if args.allow_unauthenticated:
        doc["allow_unauthenticated"] = True
    if args.cidr_allow or args.cidr_deny:
        doc["ip_restriction"] = {"allow_cidrs": args.cidr_allow, "deny_cidrs": args.cidr_deny}
    if proto == "http":
        _http_doc(args, doc)
    if getattr(args, "traffic_policy_file", None):
        doc["traffic_policy"] = _policy(args.traffic_policy_file)
    for key in ("mutual_tls_cas", "crt", "key", "terminate_at"):
        if getattr(args, key, None) is not None:
            doc[key] = args.terminate_at if key == "terminate_at" else \
                os.path.abspath(getattr(args, key))
    if proto == "tcp" and args.remote_addr:
        doc["remote_addr"] = args.remote_addr
    if args.url:
        _url(doc, proto, args.url)
    return doc
