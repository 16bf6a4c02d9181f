"""Whether this machine trusts the server's certificate, checked when the config gains a
server address or a CA (``edgeway config add-server-addr``, ``add-root-cas``): one TLS
handshake with the config's ``root_cas`` (and client certificate), with a short timeout. The
answer is a sentence for the person at the terminal, with the commands that fix an
untrusted certificate."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

from edgeway.agent.config import AgentConfig
from edgeway.agent.dial import context
from edgeway.agent.settings import server_host

TIMEOUT = 3.0  # seconds for the TCP connection and the handshake
HOSTNAME_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH


def fix(config_file: Path, named: bool) -> str:
    """The commands that make the server's CA trusted."""
    flag = f" --config {config_file}" if named else ""
    return ("on the server run `edgeway ca export > ca.pem`, copy ca.pem here and run "
            f"`edgeway config add-root-cas ca.pem{flag}`")


def check(config: AgentConfig, config_file: Path, named: bool) -> tuple[str, str]:
    """(trusted, untrusted or unknown; what to tell the person)."""
    host = server_host(config.server_addr, config.options.region)
    port = int(config.server_addr.rpartition(":")[2])
    where = "the system's CAs" if config.root_cas in ("trusted", "host") else config.root_cas
    try:
        ctx = context(config.root_cas, config.options.client_cert, config.options.client_key)
        with socket.create_connection((host, port), timeout=TIMEOUT) as sock, \
                ctx.wrap_socket(sock, server_hostname=host):
            pass
    except ssl.SSLCertVerificationError as exc:
        if exc.verify_code == HOSTNAME_MISMATCH:
            return "untrusted", (f"the server's certificate is not valid for {host} "
                           f"({exc.verify_message}): check server_addr")
        return "untrusted", (f"the server's certificate is not trusted yet: it is not signed "
                             f"by a CA in root_cas ({where}; {exc.verify_message}). To trust it, "
                             + fix(config_file, named))
    except TimeoutError:
        return "unknown", (f"the server's certificate could not be checked: no TLS handshake "
                           f"with {host}:{port} within {TIMEOUT:g} s")
    except (OSError, ValueError) as exc:  # (ssl.SSLError is an OSError)
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return "unknown", (f"the server's certificate could not be checked "
                           f"({host}:{port}: {why})")
    return "trusted", f"the server's certificate is trusted (root_cas: {where})"
