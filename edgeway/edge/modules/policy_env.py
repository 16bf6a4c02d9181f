"""The CEL variables a traffic policy's rules see: a request's (``conn``, ``req``, ``vars``)
and, on its response, the response's (``res``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from edgeway.edge.modules.policy_values import LOGS, Headers


def _header_map(headers: Headers) -> dict[str, list[str]]:
    """``req.headers``/``res.headers``: lower-case names to their values."""
    names: dict[str, list[str]] = {}
    for k, v in headers:
        names.setdefault(k.decode("latin-1").lower(), []).append(v.decode("latin-1"))
    return names


def request_env(method: bytes, target: bytes, headers: Headers, host: str, scheme: str,
                ip: str, port: int, http10: bool) -> dict[str, Any]:
    """The CEL variables of a request."""
    raw = target.decode("latin-1")
    path, _, query = raw.partition("?")
    names = _header_map(headers)
    length = names.get("content-length", ["-1"])[0]
    hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return {
        "conn": {"client_ip": ip, "client_port": port},
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
