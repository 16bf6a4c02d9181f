"""Value checks for the agent config file: each parses one YAML value or raises `Invalid`.

`Invalid` carries only the rule ("must be …"); `edgeway.agent.config` adds the file and the
key path. Values the user wrote are echoed back, except secrets.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_INSPECT_DB_SIZE = 50 * 1024 * 1024
NAME = re.compile(r"[A-Za-z0-9_.-]+")  # tunnel and label names
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOSTNAME = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}\.?")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
          "h": 3600.0}
URL_PORTS = {"http": 80, "https": 443}


class Invalid(ValueError):
    """A value breaks a rule; the message says which."""


def show(value: object) -> str:
    """A value as the user would have written it in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return repr(value)


def unknown_key(key: str, allowed: Iterable[str]) -> str:
    """The rule for a key nobody knows: the closest known one, else the whole list."""
    options = sorted(allowed)
    close = difflib.get_close_matches(key, options, n=1)
    if close:
        return f"unknown key (did you mean {close[0]!r}?)"
    return "unknown key; allowed keys: " + ", ".join(options)


def string(value: object, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise Invalid(f"must be a string (got {show(value)})")
    if not empty and not value.strip():
        raise Invalid("must not be empty")
    return value


def string_list(value: object) -> list[str]:
    if not isinstance(value, list):
        raise Invalid(f"must be a list of strings (got {show(value)})")
    for i, item in enumerate(value, 1):
        if not isinstance(item, str) or not item.strip():
            raise Invalid(f"entry {i} must be a non-empty string (got {show(item)})")
    return value


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"must be true or false (got {show(value)})")
    return value


def metadata(value: object) -> str:
    text = string(value, empty=True)
    if len(text) > 4096:
        raise Invalid(f"must be at most 4096 characters (got {len(text)})")
    return text


def duration(value: object) -> float:
    """Seconds from a Go-style duration ("10s", "500ms", "1m30s") or a number of seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise Invalid(f"must be a duration like '10s', '500ms' or '1m30s' (got {show(value)})")
    if isinstance(value, str):
        text = value.strip()
        parts = list(_DURATION_PART.finditer(text))
        if not text or "".join(m.group(0) for m in parts) != text:
            raise Invalid(f"must be a duration like '10s', '500ms' or '1m30s' (got {value!r})")
        seconds = sum(float(m.group(1)) * _UNITS[m.group(2)] for m in parts)
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds <= 0:
        raise Invalid(f"must be longer than zero (got {show(value)})")
    return seconds


def is_host(host: str) -> bool:
    """An IP address or a host name (letters, digits, '-', '_'; the last label not numeric)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        labels = host.rstrip(".").split(".")
        return (len(host) <= 253 and _HOSTNAME.fullmatch(host) is not None
                and not labels[-1].isdigit())
    return True


def port(value: object) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise Invalid(f"port must be from 1 to 65535 (got {show(value)})")
    return value


def host_port(text: str, default_port: int | None = None) -> tuple[str, int]:
    """`host:port`, `[v6]:port`, or with a default port also `host`, `[v6]` and a bare v6."""
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        host, rest = text[1:end], text[end + 1:]
        if end < 0 or ":" not in host or (rest and not rest.startswith(":")):
            raise Invalid(f"must be host:port with IPv6 hosts as [addr]:port (got {text!r})")
        port_text = rest[1:] if rest else None
    elif text.count(":") > 1:
        if default_port is None:
            raise Invalid(f"IPv6 addresses need brackets: [addr]:port (got {text!r})")
        host, port_text = text, None
    elif ":" in text:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, None
    if not is_host(host):
        raise Invalid(f"{host!r} is not a valid host name or IP address (in {text!r})")
    if port_text is None:
        if default_port is None:
            raise Invalid(f"must be host:port (got {text!r})")
        return host, default_port
    return host, port(port_text)


def join_host_port(host: str, number: int) -> str:
    return f"[{host}]:{number}" if ":" in host else f"{host}:{number}"


def local_addr(value: object, schemes: tuple[str, ...]) -> tuple[str, str, int]:
    """A tunnel's `addr` as (scheme, host, port). `schemes` are the URL schemes allowed, the
    first one being the default; a port alone or host:port gets the default host/scheme."""
    wanted = "a port, host:port or URL"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise Invalid(f"must be {wanted} (got {show(value)})")
    text = value if isinstance(value, int) else value.strip()
    if isinstance(text, int) or text.isdigit():
        return schemes[0], DEFAULT_HOST, port(text)
    if "://" not in text:
        try:
            return (schemes[0], *host_port(text))
        except Invalid as exc:
            raise Invalid(f"must be {wanted}: {exc}") from None
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in schemes:
        raise Invalid(f"URL scheme must be one of {', '.join(schemes)} here (got {text!r})")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise Invalid(f"URL must be scheme://host[:port] only (got {text!r})")
    try:
        number = parts.port
    except ValueError:
        raise Invalid(f"URL has an invalid port (got {text!r})") from None
    host = parts.hostname or ""
    if not is_host(host):
        raise Invalid(f"URL needs a valid host (got {text!r})")
    if number is None:
        if scheme not in URL_PORTS:
            raise Invalid(f"{scheme} URLs need a port (got {text!r})")
        number = URL_PORTS[scheme]
    return scheme, host, port(number)


def domain(value: object, *, wildcard: bool) -> str:
    text = string(value).strip().lower()
    name = text[2:] if wildcard and text.startswith("*.") else text
    try:
        ipaddress.ip_address(name)
    except ValueError:
        if is_host(name) and not name.endswith("."):
            return text
    raise Invalid(f"must be a domain name{' (wildcards as *.name)' if wildcard else ''}"
                  f" (got {value!r})")


def allow_host(text: str) -> str:
    """A `web_allow_hosts` entry: an IP, a CIDR, a host name or `.suffix`."""
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        if not is_host(text.removeprefix(".")):
            raise Invalid(
                f"entries must be IPs, CIDRs, host names or .suffixes (got {text!r})") from None
    return text


def authtoken(value: object) -> str:
    if not isinstance(value, str):  # never echoed: it is a secret
        raise Invalid(f"must be a string (got {type(value).__name__})")
    if not value or any(c.isspace() for c in value):
        raise Invalid("must be a non-empty string without spaces")
    return value


def server_addr(value: object) -> str:
    return join_host_port(*host_port(string(value), 443))


def root_cas(value: object, origin: str) -> str:
    """trusted, host, or a PEM file; a relative path is relative to the config file `origin`."""
    text = string(value)
    if text in ("trusted", "host"):
        return text
    path = os.path.expanduser(text)
    path = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(origin)), path))
    if not os.path.isfile(path):
        raise Invalid(f"must be trusted, host or a PEM file of CA certificates; no file {path}")
    try:
        with open(path, "rb") as f:
            pem = f.read()
    except OSError as exc:
        raise Invalid(f"cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise Invalid(f"{path} holds no PEM certificate")
    return path


def web_addr(value: object) -> str | None:
    """host:port of the local API, port 0 for one the system picks; None when ``false``."""
    if value is False:
        return None
    return join_host_port(*web_host_port(string(value)))


def web_host_port(text: str) -> tuple[str, int]:
    """A ``web_addr``'s host and port, port 0 (one the system picks) included."""
    text = text.strip()
    if text.endswith(":0"):  # (host_port checks the host; 0 is no port it takes)
        return host_port(text[:-1] + "1")[0], 0
    return host_port(text)


def inspect_db_size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise Invalid(f"must be a number of bytes, 0 for the default or -1 to disable "
                      f"inspection (got {show(value)})")
    return value or DEFAULT_INSPECT_DB_SIZE


def proto(value: object) -> str:
    if value not in ("http", "https", "tcp", "tls"):
        raise Invalid(f"must be one of http, tcp, tls (got {show(value)})")
    return str(value)
