"""The official ngrok SDK as the agent in edge tests (in a subprocess), and clients that reach
public URLs through the edge's loopback listeners (the generated names do not resolve, so the
client dials the listener and sends the name as Host header and SNI)."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from http.cookiejar import CookieJar
from typing import Any
from urllib.parse import urlsplit

import h11
import httpx

from tests.server import Server

SCRIPT = textwrap.dedent("""
    import asyncio, json, sys, ngrok
    spec = json.loads(sys.argv[1])
    async def main():
        s = await (ngrok.SessionBuilder().authtoken(spec["token"]).server_addr(spec["addr"])
                   .ca_cert(bytearray(open(spec["ca"], "rb").read())).connect())
        out = []
        for ln in spec["listeners"]:
            kind = ln["kind"]
            if kind == "labeled":
                b = s.labeled_listener()
                for k, v in ln["labels"].items():
                    b = b.label(k, v)
            elif kind in ("http", "https"):
                b = s.http_endpoint()
                if kind == "http":
                    b = b.scheme("HTTP")
                if ln.get("basic_auth"):
                    b = b.basic_auth(*ln["basic_auth"])
                if ln.get("compression"):
                    b = b.compression()
                if ln.get("oidc"):
                    b = b.oidc(*ln["oidc"])
                if ln.get("oauth"):
                    b = b.oauth(*ln["oauth"])
                if ln.get("webhook"):
                    b = b.webhook_verification(*ln["webhook"])
                for pattern in ln.get("deny_ua", []):
                    b = b.deny_user_agent(pattern)
                if ln.get("wstcp"):
                    b = b.websocket_tcp_conversion()
            elif kind == "tls":
                b = s.tls_endpoint()
                if ln.get("termination"):
                    b = b.termination(*(bytearray(p.encode()) for p in ln["termination"]))
            else:
                b = s.tcp_endpoint()
                if ln.get("remote_addr"):
                    b = b.remote_addr(ln["remote_addr"])
            if ln.get("mtls_ca"):
                b = b.mutual_tlsca(bytearray(ln["mtls_ca"].encode()))
            for cidr in ln.get("allow_cidrs", []):
                b = b.allow_cidr(cidr)
            for cidr in ln.get("deny_cidrs", []):
                b = b.deny_cidr(cidr)
            if ln.get("policy"):
                b = b.traffic_policy(ln["policy"])
            if ln.get("legacy_policy"):  # (the SDKs' policy(): the earlier phase names)
                b = b.policy(ln["legacy_policy"])
            if ln.get("domain"):
                b = b.domain(ln["domain"])
            if ln.get("pool"):
                b = b.pooling_enabled(True)
            try:
                listener = await b.listen_and_forward(ln["forward"])
                out.append({"url": listener.url(), "id": listener.id()})
            except Exception as exc:
                out.append({"error": repr(exc)})
        print(json.dumps(out), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await s.close()
    asyncio.run(main())
""")


@dataclass
class Agent:
    proc: subprocess.Popen[str]
    listeners: list[dict[str, str]]

    def stop(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.close()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.proc.stdout.close()
        self.proc.stdin.close()

    @property
    def urls(self) -> list[str]:
        return [ln.get("url", "") for ln in self.listeners]


def agent(srv: Server, token: str, *listeners: dict[str, Any]) -> Agent:
    spec = {"token": token, "addr": f"localhost:{srv.tunnel_port}",
            "ca": str(srv.data_dir / "ca.pem"), "listeners": list(listeners)}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, json.dumps(spec)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        raise AssertionError("the agent exited before binding")
    return Agent(proc, json.loads(line))


CONNECT = textwrap.dedent("""
    import asyncio, sys, ngrok
    async def main():
        try:
            await (ngrok.SessionBuilder().authtoken(sys.argv[1]).server_addr(sys.argv[2])
                   .ca_cert(bytearray(open(sys.argv[3], "rb").read())).connect())
        except Exception as exc:
            print("refused:", exc)
            return
        print("connected")
    asyncio.run(main())
""")


def sdk_connect(srv: Server, token: str) -> str:
    """What an SDK session start says: ``connected``, or ``refused: <the SDK's error>``."""
    out = subprocess.run([sys.executable, "-c", CONNECT, token, f"localhost:{srv.tunnel_port}",
                          str(srv.data_dir / "ca.pem")], capture_output=True, text=True,
                         timeout=60)
    return out.stdout


def ca_context(srv: Server) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(srv.data_dir / "ca.pem"))


class EdgeClient:
    """httpx towards public URLs: dials the edge listener for the URL's scheme. Like a
    browser, it keeps connections per host name: a connection made with one TLS server name
    is not reused for another host (the edge would answer 421)."""

    def __init__(self, srv: Server, timeout: float = 30) -> None:
        self.srv, self.timeout = srv, timeout
        self.clients: dict[str, httpx.Client] = {}
        self.cookies = CookieJar()  # one jar for every host, as in a browser

    @property
    def http(self) -> httpx.Client:
        """A client of its own, for requests built by hand (one host per connection)."""
        return self._client("")

    def __enter__(self) -> EdgeClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        for client in self.clients.values():
            client.close()

    def _client(self, host: str) -> httpx.Client:
        client = self.clients.get(host)
        if client is None:
            client = self.clients[host] = httpx.Client(
                verify=ca_context(self.srv), timeout=self.timeout, cookies=self.cookies)
        return client

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = self.srv.https_port if parts.scheme == "https" else self.srv.http_port
        target = f"{parts.scheme}://127.0.0.1:{port}{parts.path or '/'}"
        if parts.query:
            target += "?" + parts.query
        headers = {"Host": parts.netloc, **kw.pop("headers", {})}
        extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
        return self._client(host).request(method, target, headers=headers,
                                          extensions=extensions, **kw)

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)


def raw_connection(srv: Server, url: str) -> socket.socket:
    """A socket to the edge for ``url`` (TLS-wrapped for https), for byte-exact exchanges."""
    parts = urlsplit(url)
    port = srv.https_port if parts.scheme == "https" else srv.http_port
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    if parts.scheme == "https":
        return ca_context(srv).wrap_socket(sock, server_hostname=parts.hostname)
    return sock


def read_all(sock: socket.socket) -> bytes:
    out = bytearray()
    while chunk := sock.recv(65536):
        out += chunk
    return bytes(out)


def parse_responses(data: bytes, requests: int = 1) -> list[tuple[int, bytes]]:
    """Status and decoded body of each response in ``data`` (as a client would read them)."""
    conn = h11.Connection(h11.CLIENT)
    out: list[tuple[int, bytes]] = []
    conn.receive_data(data)
    conn.receive_data(b"")
    for _ in range(requests):
        conn.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
        conn.send(h11.EndOfMessage())
        status, body = 0, b""
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
            else:
                raise AssertionError(f"incomplete response: {event}")
        out.append((status, body))
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
    return out
