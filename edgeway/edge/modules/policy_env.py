"""The CEL variables a traffic policy's rules see: a request's (``conn``, ``req``, ``vars``,
``endpoint``) and, on its response, the response's (``res``)."""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

from edgeway.catalog.modules.policy import TCP
from edgeway.edge.hooks import UNKNOWN, Local
from edgeway.edge.modules.policy_values import LOGS, Headers


def _header_map(headers: Headers) -> dict[str, list[str]]:
    """``req.headers``/``res.headers``: lower-case names to their values."""
    names: dict[str, list[str]] = {}
    for k, v in headers:
        names.setdefault(k.decode("latin-1").lower(), []).append(v.decode("latin-1"))
    return names


def conn_vars(ip: str, port: int, local: Local, bytes_in: int | None = None,
              bytes_out: int | None = None) -> dict[str, Any]:
    """``conn.*``: the client's and the server's address, this server's region, when the
    connection began (``ts.start``); ``bytes_in``/``bytes_out`` where they are known (0 at
    a TCP connection's start)."""
    out: dict[str, Any] = {
        "client_ip": ip, "client_port": port, "server_ip": local.ip,
        "server_port": local.port, "server_region": local.region,
        "ts": {"start": datetime.fromtimestamp(local.start or time.time(), UTC)}}
    if bytes_in is not None:
        out["bytes_in"], out["bytes_out"] = bytes_in, bytes_out
    return out


def request_env(method: bytes, target: bytes, headers: Headers, host: str, scheme: str,
                ip: str, port: int, http10: bool, local: Local = UNKNOWN) -> dict[str, Any]:
    """The CEL variables of a request."""
    raw = target.decode("latin-1")
    path, _, query = raw.partition("?")
    names = _header_map(headers)
    length = names.get("content-length", ["-1"])[0]
    hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return {
        "conn": conn_vars(ip, port, local),
        "req": {"method": method.decode("latin-1"), "host": host, "headers": names,
                "version": "HTTP/1.0" if http10 else "HTTP/1.1",
                "content_length": int(length) if length.isdigit() else -1,
                "url": {"path": path, "raw_path": path, "query": query, "host": hostname,
                        "scheme": scheme, "authority": host,
                        "raw": f"{scheme}://{host}{raw}", "query_params": parse_qs(query)}},
        "vars": {},
        LOGS: [],
    }


def response_env(env: dict[str, Any], status: int, headers: Headers) -> dict[str, Any]:
    """The request's variables (its ``vars`` the same object: set-vars in the response phase
    adds to them) and the response's."""
    return {**env, "vars": env.setdefault("vars", {}),
            "res": {"status_code": status, "headers": _header_map(headers)}}


DEFAULT_PORTS = {"http": 80, "https": 443, "tls": 443}


def endpoint_vars(id_: str, url: str) -> dict[str, Any]:
    """``endpoint.*`` of the endpoint ``id_`` at ``url``: ``id``, ``url``, ``protocol``,
    ``host``, ``port`` and ``addr`` (host:port)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    except ValueError:
        port = 0
    return {"id": id_, "url": url, "protocol": parts.scheme, "host": host, "port": port,
            "addr": f"[{host}]:{port}" if ":" in host else f"{host}:{port}"}


def request_endpoint(scheme: str, host: str, edge_id: str) -> dict[str, Any]:
    """``endpoint.*`` of an HTTPS edge's request: the name and port it came to (its Host)."""
    return endpoint_vars(edge_id, f"{scheme}://{host}")


# Variables of ngrok's reference this edge does not have, and why: a rule reading one is
# refused (it could never match as written), never evaluated to a silent "no".
NO_VARIABLE = {
    "conn.geo": "no GeoIP database here to tell where an address is",
    "conn.bytes_in": "connections' byte counts are known only at a TCP connection's start",
    "conn.bytes_out": "connections' byte counts are known only at a TCP connection's start",
}
_READ = re.compile(r"\$\{(.*?)\}")


def unknown_variable(phase: str, rule: Any) -> str | None:
    """The first variable of ``NO_VARIABLE`` a rule's expressions or interpolations read in
    ``phase`` (the byte counts are there in on_tcp_connect), or None."""
    if not isinstance(rule, dict):
        return None
    read = [str(e) for e in rule.get("expressions") or []]
    read += _READ.findall(json.dumps(rule.get("actions") or []))
    for name in NO_VARIABLE:
        if (phase != TCP or name == "conn.geo") and any(
                re.search(rf"\b{re.escape(name)}\b", text) for text in read):
            return name
    return None
