"""Reaching the server: the TLS context (``root_cas``, the client certificate), the dial with
``connect_timeout`` and ``--resolve``, and what a failure means for the person running the
agent (``hint``: a wrong CA, a refused authtoken, nothing listening…). Also the context for
local ``https://`` services, which usually have self-signed certificates."""

from __future__ import annotations

import asyncio
import ssl

from edgeway.agent.config import AgentConfig
from edgeway.agent.settings import server_host
from edgeway.tlsobject import direct
from edgeway.tunnel.muxado.aio import MuxConnection


def _local_tls() -> ssl.SSLContext:
    """Local https:// upstreams usually have self-signed certificates: not verified."""
    context = direct(ssl.create_default_context())
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


LOCAL_TLS = _local_tls()


def context(root_cas: str, cert: str = "", key: str = "") -> ssl.SSLContext:
    if root_cas in ("trusted", "host", ""):
        ctx = ssl.create_default_context()
    else:  # (its certificates are trusted as given: a CA file may hold an intermediate,
        ctx = ssl.create_default_context(cafile=root_cas)  # as Go's agents take it)
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    if cert:
        ctx.load_cert_chain(cert, key)
    return direct(ctx)


def refused(exc: BaseException, server: str) -> ssl.SSLError | None:
    """A TLS alert refusing our client certificate (or its absence), with what to do."""
    text = str(exc)
    if not isinstance(exc, ssl.SSLError) or not ("CERTIFICATE_REQUIRED" in text
                                                 or "UNKNOWN_CA" in text):
        return None
    return ssl.SSLError(f"{server} refused the TLS handshake: the server requires an agent "
                        "client certificate issued by its agent certificate authority "
                        f"(client_cert and client_key in the config; {exc.reason or text})")


async def dial(config: AgentConfig, resolve: dict[str, str]) -> MuxConnection:
    opts = config.options
    host = server_host(config.server_addr, opts.region)
    port = int(config.server_addr.rpartition(":")[2])
    target = resolve.get(f"{host.lower()}:{port}") or resolve.get(host.lower(), host)
    ctx = context(config.root_cas, opts.client_cert, opts.client_key)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            target, port, ssl=ctx, server_hostname=host), opts.connect_timeout)
    except TimeoutError:
        raise TimeoutError(f"no TLS connection to {host}:{port} within "
                           f"{opts.connect_timeout:g}s (connect_timeout)") from None
    except ssl.SSLError as exc:  # (TLS 1.2: the server refuses in the handshake)
        raise refused(exc, config.server_addr) or exc from None
    return MuxConnection(reader, writer, client=True)


def hint(error: str, config: AgentConfig) -> str:
    """What to do about a session failure, or "" when there is nothing to add."""
    if "CERTIFICATE_VERIFY_FAILED" in error:
        where = config.root_cas if config.root_cas not in ("trusted", "host") else \
            "the system's CAs"
        return (f"the server's certificate is not signed by a CA in root_cas ({where}): on "
                "the server run `edgeway ca export > ca.pem`, then here `edgeway config "
                "add-root-cas ca.pem` (or pass --root-cas ca.pem)")
    if "authtoken" in error.lower() and ("not valid" in error or "refused" in error
                                         or "required" in error):
        return ("make an authtoken with POST /credentials on the server's management API "
                "(its `token` member), then `edgeway config add-authtoken TOKEN`")
    if "Connection refused" in error or "Errno 111" in error:
        return f"nothing listens at {config.server_addr}: is `edgeway serve` running there?"
    if "Name or service not known" in error or "Errno -2" in error or "Errno -3" in error:
        return ("the server's name does not resolve: fix server_addr, or dial an address with "
                "--resolve HOST:ADDRESS")
    if "client certificate" in error:
        return "see client_cert and client_key in the agent config"
    return ""
