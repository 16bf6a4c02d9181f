"""The agent's own settings from the config file's top level, beyond the session: the console
(``console_ui``), its log (``log``, ``log_level``, ``log_format``) and how it connects
(``region``, ``connect_timeout``, and ``client_cert``/``client_key``, an Edgeway addition: the
client certificate a server started with ``--agent-client-cas`` asks for). Each is checked here
and applied by ``edgeway agent start``.

``update_check`` and ``update_channel`` have nothing to act on (the agent is updated with its
Python package, never by itself): ``update_check: false`` states what is true and is accepted;
``true`` and any ``update_channel`` are refused rather than accepted and ignored.
"""

from __future__ import annotations

import logging
import os
import re
import ssl
import sys
from dataclasses import dataclass
from typing import TextIO

from edgeway import logs
from edgeway.agent.configcheck import Invalid, boolean, duration, show, string

CONSOLE_UI = ("true", "false", "iftty")
LOG_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO,
              "warn": logging.WARNING, "error": logging.ERROR, "crit": logging.CRITICAL}
LOG_FORMATS = ("json", "logfmt", "term")
_REGION = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
DEFAULT_CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class AgentSettings:
    console_ui: str = "true"  # true: always (a screen per change when not a terminal)
    log: str = ""  # stdout, stderr, false or a file path; "": stderr unless the console is on it
    log_level: str = "info"
    log_format: str = "json"
    region: str = ""  # dial tunnel.<region>.<server_addr host>
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT  # seconds for TCP and TLS together
    client_cert: str = ""  # PEM certificate (chain) file presented to the server
    client_key: str = ""  # its private key file

    def plan(self, out_tty: bool, err_tty: bool) -> tuple[bool, str]:
        """Whether the console is drawn, and where the log goes (stdout, stderr, false or a
        file). They never share a terminal: a log on stdout turns the console off, and so does
        an explicit ``stderr`` when both are the same terminal; with no ``log`` set, the log is
        off while the console is drawn on a terminal that stderr also writes to."""
        console = self.console_ui == "true" or (self.console_ui == "iftty" and out_tty)
        if self.log == "stdout" or (self.log == "stderr" and out_tty and err_tty):
            console = False
        log = self.log or ("false" if console and out_tty and err_tty else "stderr")
        return console, log

    def configure_logs(self, target: str) -> None:
        stream = open_log(target)
        if stream is None:
            logs.disable()
        else:
            logs.configure(stream, LOG_LEVELS[self.log_level], self.log_format)


def open_log(target: str) -> TextIO | None:
    """The log's stream (None: ``false``); a file is opened for appending."""
    if target == "false":
        return None
    if target in ("stdout", "stderr"):
        return sys.stdout if target == "stdout" else sys.stderr
    try:
        return open(target, "a", buffering=1, encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"log: cannot open {target}: {exc.strerror or exc}") from None


def console_ui(value: object) -> str:
    text = str(value).lower() if isinstance(value, bool) else value
    if text not in CONSOLE_UI:
        raise Invalid(f"must be true, false or iftty (got {show(value)})")
    return str(text)


def log_target(value: object) -> str:
    if value is False:
        return "false"
    return string(value)


def log_level(value: object) -> str:
    if value not in LOG_LEVELS:
        raise Invalid(f"must be one of {', '.join(LOG_LEVELS)} (got {show(value)})")
    return str(value)


def log_format(value: object) -> str:
    if value not in LOG_FORMATS:
        raise Invalid(f"must be one of {', '.join(LOG_FORMATS)} (got {show(value)})")
    return str(value)


def region(value: object) -> str:
    text = string(value)
    if not _REGION.match(text):
        raise Invalid(f"must be a region code such as us or eu (got {text!r})")
    return text


def connect_timeout(value: object) -> float:
    seconds = duration(value)
    if seconds > 600:
        raise Invalid(f"must be at most 10m (got {value!r})")
    return seconds


def pem_file(value: object) -> str:
    path = string(value)
    if not os.path.isabs(path):
        raise Invalid(f"must be an absolute path to a PEM file (got {path!r})")
    if not os.path.isfile(path):
        raise Invalid(f"{path}: no such file")
    return path


def client_certificate(cert: str, key: str) -> None:
    """Both or neither, and a pair that loads (the key matches the certificate)."""
    if bool(cert) != bool(key):
        raise Invalid("client_cert and client_key go together")
    if cert:
        try:
            ssl.create_default_context().load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as exc:
            raise Invalid(f"client_cert and client_key do not load as a certificate and its "
                          f"key: {exc}") from None


def update_check(value: object) -> bool:
    if boolean(value):
        raise Invalid("the Edgeway agent never checks for updates (it is updated with its "
                      "Python package): set false or remove the key")
    return False


def update_channel(_value: object) -> str:
    raise Invalid("the Edgeway agent has no update channels (it is updated with its Python "
                  "package): remove the key")


def server_host(server_addr: str, region_code: str) -> str:
    """The host the agent dials: ``tunnel.<region>.<host>`` with a region (the agent ingress
    region domains), else the host of ``server_addr``."""
    host = server_addr.rpartition(":")[0]
    host = host[1:-1] if host.startswith("[") else host
    return f"tunnel.{region_code}.{host}" if region_code else host
