"""Which names an agent may bind (reserved, under a reserved wildcard, generated; once, or
pooled; within the credential's ACL; not an edge's), StopTunnel when the reservation goes,
100 MB through a TCP tunnel, the same URLs after a rolling restart of the server, and the
tunnel listener's certificate for agent ingress region domains."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import ssl
import threading
from pathlib import Path

import httpx
import pytest

from tests.edge import tls_upstream, upstream
from tests.edge.agents import EdgeClient, agent, ca_context
from tests.server import Server, start
from tests.waiting import until


def reserve(api: httpx.Client, *domains: str) -> None:
    for domain in domains:
        r = api.post("/reserved_domains", json={"domain": domain})
        assert r.status_code == 201, r.text


def test_reserved_wildcard_unreserved_and_taken_names(srv: Server, token: str,
                                                      service: int) -> None:
    fwd = f"http://127.0.0.1:{service}"
    with srv.client() as api:
        reserve(api, "shop.example.net", "*.site.example.net")
    a = agent(srv, token, {"kind": "https", "domain": "shop.example.net", "forward": fwd},
              {"kind": "https", "domain": "a.site.example.net", "forward": fwd},
              {"kind": "https", "domain": "evil.example.com", "forward": fwd},
              {"kind": "https", "domain": "deep.a.site.example.net", "forward": fwd})
    try:
        shop, site, evil, deep = a.listeners
        assert shop["url"] == f"https://shop.example.net:{srv.https_port}"
        assert site["url"] == f"https://a.site.example.net:{srv.https_port}"
        assert "'evil.example.com' is not reserved" in evil["error"]
        assert "ERR_NGROK_8000" in evil["error"]
        assert "not reserved" in deep["error"]  # a wildcard covers one label
        with EdgeClient(srv) as web:
            assert web.get(shop["url"] + "/p").text == "svc /p"
            assert web.get(site["url"] + "/q").text == "svc /q"
        b = agent(srv, token, {"kind": "https", "domain": "shop.example.net", "forward": fwd})
        try:
            assert "already bound by another tunnel" in b.listeners[0]["error"]
        finally:
            b.stop()
    finally:
        a.stop()


def test_wildcard_binds_serve_every_name_no_more_specific_tunnel_serves(
        srv: Server, service: int) -> None:
    fwd = f"http://127.0.0.1:{service}"
    with srv.client() as api:
        reserve(api, "*.site1.example.org", "*.example.org")
        token = api.post("/credentials", json={"acl": ["bind:*.site1.example.org"]}).json()
        anything = api.post("/credentials", json={"acl": ["*"]}).json()
    with upstream.running("specific") as specific:
        a = agent(srv, token["token"],
                  {"kind": "https", "domain": "*.site1.example.org", "forward": fwd},
                  {"kind": "https", "domain": "*.other.example.org", "forward": fwd})
        b = agent(srv, anything["token"],
                  {"kind": "https", "domain": "a.site1.example.org",
                   "forward": f"http://127.0.0.1:{specific}"},
                  {"kind": "https", "domain": "*.nope.example.org", "forward": fwd},
                  {"kind": "https", "domain": "*.edgeway.localhost", "forward": fwd})
        try:
            wild, outside = a.listeners
            assert wild["url"] == f"https://*.site1.example.org:{srv.https_port}", wild
            assert "ACL" in outside["error"]
            exact, unreserved, base = b.listeners
            assert exact["url"] == f"https://a.site1.example.org:{srv.https_port}", exact
            assert "'*.nope.example.org' is not reserved" in unreserved["error"]
            assert "base domain" in base["error"]
            with EdgeClient(srv) as web:
                for name in ("x", "y-2"):
                    r = web.get(f"https://{name}.site1.example.org:{srv.https_port}/p")
                    assert r.text == "svc /p"
                r = web.get(f"https://a.site1.example.org:{srv.https_port}/p")
                assert r.text == "specific /p"  # the more specific tunnel wins
                with pytest.raises(httpx.ConnectError):  # a wildcard covers one label: no
                    web.get(f"https://deep.x.site1.example.org:{srv.https_port}/p")  # cert
        finally:
            a.stop()
            b.stop()
    with EdgeClient(srv) as web:  # gone with its agent
        r = web.get(f"https://x.site1.example.org:{srv.https_port}/p")
        assert r.status_code == 404


def test_pooled_binds_share_a_name(srv: Server, token: str) -> None:
    """A name served by one tunnel, its requests answered (the edge remembers its route),
    then by two: from the second bind on, they take turns, on a connection kept alive from
    before it too; once the first leaves, the second answers them all."""
    with srv.client() as api:
        reserve(api, "pool.example.net")
    with upstream.running("left") as left, upstream.running("right") as right:
        a = agent(srv, token, {"kind": "https", "domain": "pool.example.net", "pool": True,
                               "forward": f"http://127.0.0.1:{left}"})
        b = None
        try:
            with EdgeClient(srv) as web:
                assert {web.get(a.urls[0] + "/x").text for _ in range(6)} == {"left /x"}
                b = agent(srv, token, {"kind": "https", "domain": "pool.example.net",
                                       "pool": True, "forward": f"http://127.0.0.1:{right}"})
                assert a.urls == b.urls
                seen = {web.get(a.urls[0] + "/x").text for _ in range(12)}
                assert seen == {"left /x", "right /x"}
                a.stop()
                asyncio.run(until(lambda: {web.get(b.urls[0] + "/y").text for _ in range(6)}
                                  == {"right /y"}, "the second bind alone answers"))
        finally:
            a.stop()
            if b is not None:
                b.stop()


def test_label_acls_with_wildcard_keys_and_values(srv: Server, service: int) -> None:
    fwd = f"http://127.0.0.1:{service}"
    with srv.client() as api:
        token = api.post("/credentials", json={"acl": ["bind:*=one", "bind:team=*"]}).json()
    cases = [({"site": "one"}, True), ({"team": "red", "zone": "one"}, True),
             ({"site": "two"}, False), ({"site": "one", "zone": "x"}, False)]
    a = agent(srv, token["token"], *[{"kind": "labeled", "labels": labels, "forward": fwd}
                                     for labels, _ in cases])
    try:
        for (labels, allowed), got in zip(cases, a.listeners, strict=True):
            assert ("error" not in got) is allowed, (labels, got)
            if not allowed:
                assert "ACL" in got["error"], got
    finally:
        a.stop()


def test_acl_and_edge_names_limit_binds(srv: Server, service: int) -> None:
    fwd = f"http://127.0.0.1:{service}"
    with srv.client() as api:
        reserve(api, "*.acl.example.net", "other.example.net", "edge.example.net")
        api.post("/edges/https", json={"hostports": ["edge.example.net:443"]})
        limited = api.post("/credentials", json={"acl": ["bind:*.acl.example.net"]}).json()
        unlimited = api.post("/credentials", json={}).json()
    a = agent(srv, limited["token"],
              {"kind": "https", "domain": "b.acl.example.net", "forward": fwd},
              {"kind": "https", "domain": "other.example.net", "forward": fwd},
              {"kind": "https", "forward": fwd})
    b = agent(srv, unlimited["token"],
              {"kind": "https", "domain": "edge.example.net", "forward": fwd})
    try:
        ok, outside, generated = a.listeners
        assert ok["url"].startswith("https://b.acl.example.net")
        assert "ACL (bind:*.acl.example.net) does not allow binding other.example.net" \
            in outside["error"]
        assert "ACL" in generated["error"]  # a generated name is outside the ACL too
        assert "is served by the edge edghts_" in b.listeners[0]["error"]
    finally:
        a.stop()
        b.stop()


def test_deleting_the_reserved_domain_stops_the_tunnel(srv: Server, token: str,
                                                      service: int) -> None:
    with srv.client() as api:
        domain = api.post("/reserved_domains", json={"domain": "gone.example.net"}).json()
        a = agent(srv, token, {"kind": "https", "domain": "gone.example.net",
                               "forward": f"http://127.0.0.1:{service}"})
        try:
            (url,) = a.urls
            with EdgeClient(srv) as web:
                assert web.get(url + "/").status_code == 200
                assert api.delete(f"/reserved_domains/{domain['id']}").status_code == 204
                asyncio.run(until(lambda: all(t["public_url"] != url for t in api.get(
                    "/tunnels").json()["tunnels"]), "the tunnel left the list", within=5))
                assert web.get(url + "/").status_code == 404
        finally:
            a.stop()


def test_one_hundred_megabytes_through_a_tcp_tunnel(srv: Server, token: str,
                                                     echo_port: int) -> None:
    a = agent(srv, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo_port}"})
    try:
        (url,) = a.urls
        size = 100 << 20
        block = os.urandom(1 << 20)
        sent, got = hashlib.sha256(), hashlib.sha256()
        received = 0
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])),
                                      timeout=60) as s:
            def send() -> None:
                for i in range(size // len(block)):
                    chunk = block[i % 7:] + block[:i % 7]  # not one block repeated
                    sent.update(chunk)
                    s.sendall(chunk)
                s.shutdown(socket.SHUT_WR)
            writer = threading.Thread(target=send)
            writer.start()
            while chunk := s.recv(1 << 20):
                got.update(chunk)
                received += len(chunk)
            writer.join()
        assert received == size and got.hexdigest() == sent.hexdigest()
    finally:
        a.stop()


def test_same_urls_after_a_rolling_restart(tmp_path: Path) -> None:
    first = start(tmp_path / "srv", None, "--reuse-port")
    ports = (int(first.base_url.rsplit(":", 1)[1]), first.tunnel_port, first.http_port,
             first.https_port)
    with upstream.running("svc") as service, upstream.echo() as echo_port:
        with first.client() as api:
            token = api.post("/credentials", json={}).json()["token"]
        a = agent(first, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"},
                  {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo_port}"})
        second: Server | None = None
        try:
            https_url, tcp_url = a.urls
            with EdgeClient(first) as web:
                assert web.get(https_url + "/before").text == "svc /before"
            # the new process starts on the same ports, then the old one stops: agents
            # reconnect at once (the SDK's back-off grows fast) and re-bind their tunnel ids
            second = start(tmp_path / "srv", None, "--reuse-port", token=first.token,
                           ports=ports)
            assert first.stop() == 0
            with EdgeClient(second) as web:
                def after() -> str:
                    try:
                        return web.get(https_url + "/after").text
                    except httpx.HTTPError as exc:
                        return repr(exc)
                # (within the SDK's back-off, on a loaded machine)
                asyncio.run(until(lambda: after() == "svc /after",
                                  lambda: f"the new process answers: {after()}", within=60))
            with socket.create_connection(("127.0.0.1", int(tcp_url.rsplit(":", 1)[1])),
                                          timeout=10) as s:
                s.sendall(b"same port")
                assert s.recv(100) == b"same port"
            with second.client() as api:
                urls = {t["public_url"] for t in api.get("/tunnels").json()["tunnels"]}
            assert urls == {https_url, tcp_url}
        finally:
            a.stop()
            if second is not None:
                assert second.stop() == 0


def test_agents_dialing_a_region_domain_get_a_certificate_for_it(srv: Server) -> None:
    with srv.client() as api:
        ingress = api.post("/agent_ingresses", json={"domain": "connect.example.org"}).json()
    (region,) = ingress["region_domains"][:1]
    context = ca_context(srv)  # verifies the chain and the host name, as the SDK does

    def verified() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", srv.tunnel_port), timeout=10) as raw, \
                    context.wrap_socket(raw, server_hostname=region) as tls:
                return tls.version() in ("TLSv1.2", "TLSv1.3")
        except ssl.SSLCertVerificationError:
            return False
    asyncio.run(until(verified, f"a certificate for {region}", within=5))
    with socket.create_connection(("127.0.0.1", srv.tunnel_port), timeout=10) as raw, \
            pytest.raises(ssl.SSLCertVerificationError):
        context.wrap_socket(raw, server_hostname="tunnel.unknown.example.org")


def test_the_operators_own_tunnel_certificate(tmp_path: Path) -> None:
    cert, key = tls_upstream.self_signed("localhost", tmp_path)
    own = start(tmp_path / "srv", None, "--tunnel-cert", str(cert), "--tunnel-key", str(key))
    try:
        context = ssl.create_default_context(cafile=str(cert))
        with socket.create_connection(("127.0.0.1", own.tunnel_port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            served = tls.getpeercert(binary_form=True)
        assert served == ssl.PEM_cert_to_DER_cert(cert.read_text())
    finally:
        assert own.stop() == 0


def test_the_endpoints_list_selects_by_id_url_and_filter(srv: Server, token: str,
                                                         service: int) -> None:
    a = agent(srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{service}"},
              {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    try:
        with srv.client() as api:
            by_url = {e["url"]: e for e in api.get("/endpoints").json()["endpoints"]}
            http, https = (by_url[u] for u in a.urls)

            def ids(params: list[tuple[str, str | int | float | bool | None]]) -> list[str]:
                r = api.get("/endpoints", params=params)
                assert r.status_code == 200, r.text
                return [e["id"] for e in r.json()["endpoints"]]

            assert ids([("url", http["url"])]) == [http["id"]]
            assert sorted(ids([("urls", http["url"]), ("urls", https["url"])])) == \
                sorted([http["id"], https["id"]])
            assert ids([("id", https["id"]), ("id", "ep_2VnUzuSHL6ybSxxhrVjJD2hcN7o")]) == \
                [https["id"]]
            assert ids([("ids", http["id"]), ("url", https["url"])]) == []  # both must hold
            assert ids([("filter", f'obj.proto == "https" && obj.url == "{https["url"]}"')]) \
                == [https["id"]]
    finally:
        a.stop()
