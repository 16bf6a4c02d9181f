"""Cloud endpoints: created through ``POST /endpoints`` (``type: cloud``), they serve their URL
with no agent: the traffic policy answers, redirects or forwards to an internal endpoint an
agent binds; a change to the policy reaches the traffic; a name is served by an edge, a cloud
endpoint or tunnels, one of them, and the API (400 ``ERR_EDGEWAY_7122``, as for edges) or the
bind says which holds it; agents' endpoints stay read-only."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.edge.agents import EdgeClient, agent
from tests.edge.test_edges import made
from tests.edge.test_policy_ip_policies import until
from tests.server import Server


def policy(*rules: dict[str, Any]) -> str:
    return json.dumps({"on_http_request": list(rules)})


def rule(expr: str, *actions: dict[str, Any]) -> dict[str, Any]:
    return {"expressions": [expr], "actions": list(actions)}


HELLO = rule("req.url.path == '/hello'", {"type": "custom-response", "config": {
    "status_code": 200, "content": "hello from ${req.host}",
    "headers": {"Content-Type": "text/plain"}}})
GO = rule("req.url.path.startsWith('/go')", {"type": "redirect", "config": {
    "to": "https://docs.example.org/", "status_code": 301}})
TCP = json.dumps({"on_tcp_connect": [{"actions": [{"type": "forward-internal", "config": {
    "url": "tcp://db.internal:5432"}}]}]})
API = rule("req.url.path.startsWith('/headers')", {"type": "forward-internal", "config": {
    "url": "https://cloud-api.internal"}})


def test_a_cloud_endpoint_serves_its_url_with_its_policy(srv: Server, token: str,
                                                         service: int) -> None:
    host = "cloud.example.com"
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        ep = made(api, "/endpoints", {"type": "cloud", "url": f"https://{host}",
                                      "traffic_policy": policy(HELLO, GO, API),
                                      "description": "front door"})
        assert (ep["type"], ep["url"], ep["host"], ep["bindings"]) == \
            ("cloud", f"https://{host}", host, ["public"])
        assert api.get(f"/endpoints/{ep['id']}").json()["traffic_policy"] == \
            policy(HELLO, GO, API)
        assert ep["id"] in {e["id"] for e in api.get("/endpoints").json()["endpoints"]}
        inner = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                                   "domain": "cloud-api.internal"})
        try:
            with EdgeClient(srv) as web:
                base = f"https://{host}"
                r = web.get(f"{base}/hello")
                assert (r.status_code, r.text) == (200, f"hello from {host}")
                r = web.get(f"{base}/go/x")
                assert (r.status_code, r.headers["location"]) == \
                    (301, "https://docs.example.org/")
                r = web.get(f"{base}/headers")
                assert r.status_code == 200 and r.headers["x-upstream"] == "yes"
                r = web.get(f"{base}/nothing")
                assert r.status_code == 404
                assert r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4021"
                r = web.get(f"http://{host}/hello")
                assert r.status_code == 308 and r.headers["location"].startswith("https://")
                # a change of the policy reaches the traffic
                changed = rule("true", {"type": "custom-response", "config": {
                    "status_code": 202, "content": "changed"}})
                r = api.patch(f"/endpoints/{ep['id']}",
                              json={"traffic_policy": policy(changed)})
                assert r.status_code == 200, r.text
                until(lambda: web.get(f"{base}/hello").status_code == 202, "the new policy")
                assert api.delete(f"/endpoints/{ep['id']}").status_code == 204
                until(lambda: web.get(f"{base}/hello").status_code == 404, "the name freed")
                assert api.get(f"/endpoints/{ep['id']}").status_code == 404
        finally:
            inner.stop()


def test_one_name_one_server_and_the_api_says_which(srv: Server, token: str,
                                                    service: int) -> None:
    with srv.client() as api:
        for name in ("c1.example.com", "c2.example.com", "c3.example.com"):
            made(api, "/reserved_domains", {"domain": name})
        hello = policy(HELLO)
        ep = made(api, "/endpoints", {"type": "cloud", "url": "https://c1.example.com",
                                      "traffic_policy": hello})
        # an edge on its name, or a second cloud endpoint: refused naming the holder
        r = api.post("/edges/https", json={"hostports": ["c1.example.com:443"]})
        assert r.status_code == 400 and ep["id"] in r.json()["msg"], r.text
        r = api.post("/endpoints", json={"type": "cloud", "url": "https://c1.example.com",
                                         "traffic_policy": hello})
        assert r.status_code == 400 and ep["id"] in r.json()["msg"], r.text
        edge = made(api, "/edges/https", {"hostports": ["c2.example.com:443"]})
        r = api.post("/endpoints", json={"type": "cloud", "url": "https://c2.example.com",
                                         "traffic_policy": hello})
        assert r.status_code == 400 and edge["id"] in r.json()["msg"], r.text
        r = api.patch(f"/endpoints/{ep['id']}", json={"url": "https://c2.example.com"})
        assert r.status_code == 400 and edge["id"] in r.json()["msg"], r.text
        # an agent's bind of a cloud endpoint's name, and a cloud endpoint on a bound name
        a = agent(srv, token,
                  {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                   "domain": "c1.example.com"},
                  {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                   "domain": "c3.example.com"})
        try:
            refused = a.listeners[0].get("error", "")
            assert f"served by the cloud endpoint {ep['id']}" in refused, refused
            r = api.post("/endpoints", json={"type": "cloud", "url": "https://c3.example.com",
                                             "traffic_policy": hello})
            assert r.status_code == 400 and a.listeners[1]["id"] in r.json()["msg"], r.text
            # an agent's endpoint is not the API's to change or delete
            agents = [e for e in api.get("/endpoints").json()["endpoints"]
                      if e["host"] == "c3.example.com"]
            assert agents and agents[0]["type"] == "ephemeral"
            for r in (api.patch(f"/endpoints/{agents[0]['id']}", json={"description": "x"}),
                      api.delete(f"/endpoints/{agents[0]['id']}")):
                assert r.status_code == 400 and r.json()["error_code"] == "ERR_EDGEWAY_7130"
        finally:
            a.stop()


def test_what_a_cloud_endpoint_cannot_be_is_refused_by_member(srv: Server) -> None:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": "c4.example.com"})
        hello = policy(HELLO)
        bad: list[tuple[dict[str, Any], str, str]] = [
            ({"url": "https://unreserved.example.net"}, "url", "not a reserved domain"),
            ({"url": "https://c4.example.com/path"}, "url", "no port, path"),
            ({"url": "https://c4.example.com:8443"}, "url", "no port, path"),
            ({"url": "tcp://c4.example.com:5432"}, "traffic_policy.on_http_request",
             "not a phase here; phases: on_tcp_connect"),
            ({"url": "tcp://c4.example.com:5432", "traffic_policy": TCP}, "url",
             "not a reserved address"),
            ({"url": "tcp://c4.example.com", "traffic_policy": TCP}, "url", "host and port"),
            ({"url": "tcp://c4.example.com:70000", "traffic_policy": TCP}, "url", "port"),
            ({"url": "tcp://db.internal:5432", "traffic_policy": TCP}, "url",
             "internal TCP endpoints are agents' binds"),
            ({"url": "tls://c4.example.com"}, "traffic_policy.on_http_request",
             "phases: on_tcp_connect"),
            ({"url": "tls://db.internal", "traffic_policy": TCP}, "url",
             "internal TLS endpoints are not served"),
            ({"url": "tls://c4.example.com:8443", "traffic_policy": TCP}, "url", "no port"),
            ({"url": "ftp://c4.example.com"}, "url", "tls:// or tcp://"),
            # actions of ngrok's reference it does not run: refused by name, with the reason
            ({"traffic_policy": policy(rule("true", {"type": "owasp-crs-request"}))},
             "on_http_request[0].actions[0].type", "web application firewall engine"),
            ({"traffic_policy": json.dumps({"on_http_response": [{"actions": [
                {"type": "owasp-crs-response"}]}]})}, ".type", "web application firewall"),
            ({"traffic_policy": policy(rule("true", {"type": "ai-gateway"}))}, ".type",
             "hosted AI model providers"),
            ({"traffic_policy": json.dumps({"on_http_response": [{"actions": [
                {"type": "sse-find-replace"}]}]})}, ".type",
             "it runs in on_event_stream_message"),
            ({"url": "https://api.internal"}, "bindings", "['internal'] for"),
            ({"bindings": ["internal"]}, "bindings", "['public'] for"),
            ({"url": "https://*.svc.internal", "bindings": ["internal"]}, "url",
             "must not be a wildcard"),
            ({"traffic_policy": "{not: [valid"}, "traffic_policy", "neither JSON nor YAML"),
            ({"traffic_policy": '{"on_connect": []}'}, "traffic_policy", "not a phase"),
            ({"traffic_policy": ""}, "traffic_policy", "is required"),
            ({"type": "edge"}, "type", ""),
        ]
        for change, member, said in bad:
            body = {"type": "cloud", "url": "https://c4.example.com",
                    "traffic_policy": hello, **change}
            r: httpx.Response = api.post("/endpoints", json=body)
            assert r.status_code == 400, (change, r.text)
            assert member in r.json()["msg"] and said in r.json()["msg"], (change, r.text)
        assert not [e for e in api.get("/endpoints").json()["endpoints"]
                    if e["url"] == "https://c4.example.com"]  # nothing half-written


def test_an_internal_cloud_endpoint_is_reached_only_through_forward_internal(
        srv: Server, token: str, service: int) -> None:
    """``https://gate.internal``, a cloud endpoint bound internal: a public cloud endpoint
    forwards to it, its own policy answers or forwards on to an agent's internal endpoint;
    no public listener serves it; an agent cannot bind its name; http-request does not call
    it (its policy would not run)."""
    host = "front-door.example.com"
    gate = policy(rule("req.url.path == '/gate'", {"type": "custom-response", "config": {
        "status_code": 203, "content": "the gate answers"}}),
        rule("true", {"type": "add-headers", "config": {"headers": {"X-Gate": "passed"}}},
             {"type": "forward-internal", "config": {"url": "https://gate-svc.internal"}}))
    front = policy(
        rule("req.url.path == '/call'", {"type": "http-request", "config": {
            "url": "https://gate.internal/gate"}}, {"type": "custom-response", "config": {
                "content": "${actions.ngrok.http_request.error.code}"}}),
        rule("true", {"type": "forward-internal", "config": {"url": "https://gate.internal"}}))
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        inner = made(api, "/endpoints", {"type": "cloud", "url": "https://gate.internal",
                                         "bindings": ["internal"], "traffic_policy": gate})
        assert (inner["bindings"], inner["host"]) == (["internal"], "gate.internal")
        made(api, "/endpoints", {"type": "cloud", "url": f"https://{host}",
                                 "traffic_policy": front})
        a = agent(srv, token,
                  {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                   "domain": "gate-svc.internal"},
                  {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                   "domain": "gate.internal"})
        try:
            assert a.urls[0] == "https://gate-svc.internal", a.listeners
            refused = a.listeners[1].get("error", "")
            assert f"served by the cloud endpoint {inner['id']}" in refused, refused
            with EdgeClient(srv) as web:
                r = web.get(f"https://{host}/gate")
                assert (r.status_code, r.text) == (203, "the gate answers")
                r = web.get(f"https://{host}/headers")
                assert r.status_code == 200 and r.headers["x-upstream"] == "yes"
                assert dict(r.json()["headers"])["x-gate"] == "passed"
                assert web.get(f"https://{host}/call").text == "guarded"
                r = web.get("http://gate.internal/gate")  # never from a public listener
                assert r.status_code == 404 and "answers" not in r.text
            # no longer internal: the name is public (on a reserved domain) and the front
            # door's forward finds nothing behind gate.internal
            r = api.patch(f"/endpoints/{inner['id']}", json={"url": f"https://gate.{host}"})
            assert r.status_code == 400 and "bindings" in r.json()["msg"], r.text
        finally:
            a.stop()


ENDPOINT_VARS = json.dumps({"on_http_request": [{"actions": [{"type": "custom-response", "config": {
    "content": "${endpoint.id} ${endpoint.url} ${endpoint.protocol} ${endpoint.host} "
               "${endpoint.port} ${endpoint.addr}"}}]}]})


def test_policies_read_the_endpoint_variables(srv: Server, token: str) -> None:
    """``endpoint.*`` in a cloud endpoint's, an agent's endpoint's and an HTTPS edge route's
    policy: the endpoint that serves the request (an edge has no endpoint of its own: its
    route's id, and the name and port the request came to)."""
    host, edge_host = "vars.example.com", "vars-edge.example.com"
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        made(api, "/reserved_domains", {"domain": edge_host})
        ep = made(api, "/endpoints", {"type": "cloud", "url": f"https://{host}",
                                      "traffic_policy": ENDPOINT_VARS})
        edge = made(api, "/edges/https", {"hostports": [f"{edge_host}:443"]})
        fixed = made(api, "/backends/http_response", {"status_code": 200, "body": "x"})
        route = made(api, f"/edges/https/{edge['id']}/routes", {
            "match_type": "path_prefix", "match": "/", "backend": {"backend_id": fixed["id"]},
            "traffic_policy": {"value": ENDPOINT_VARS}})
        a = agent(srv, token, {"kind": "http", "forward": "http://127.0.0.1:9",
                               "policy": ENDPOINT_VARS})
        try:
            theirs = next(e for e in api.get("/endpoints").json()["endpoints"]
                          if e["url"] == a.urls[0])
            with EdgeClient(srv) as web:
                assert web.get(f"https://{host}/").text == \
                    f"{ep['id']} https://{host} https {host} 443 {host}:443"
                agent_host = a.urls[0].split("://", 1)[1]
                name, port = agent_host.rsplit(":", 1) if ":" in agent_host else \
                    (agent_host, "80")
                assert web.get(f"{a.urls[0]}/").text == \
                    f"{theirs['id']} {a.urls[0]} http {name} {port} {name}:{port}"
                assert web.get(f"https://{edge_host}/").text == \
                    f"{route['id']} https://{edge_host} https {edge_host} 443 {edge_host}:443"
        finally:
            a.stop()


CONN_VARS = json.dumps({"on_http_request": [
    {"expressions": ["conn.ts.start > timestamp('2020-01-01T00:00:00Z')"],
     "actions": [{"type": "custom-response", "config": {
         "content": "${conn.client_ip} ${conn.server_ip} ${conn.server_port} "
                    "${conn.server_region}"}}]}]})


def test_policies_read_the_connection_variables(srv: Server) -> None:
    """``conn.*`` of a request: both ends of its connection, this server's region and when
    the connection began; variables this edge does not have are refused by name."""
    host = "conn-vars.example.com"
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        ep = made(api, "/endpoints", {"type": "cloud", "url": f"https://{host}",
                                      "traffic_policy": CONN_VARS})
        region = ep["region"]
        with EdgeClient(srv) as web:
            assert web.get(f"https://{host}/").text == \
                f"127.0.0.1 127.0.0.1 {srv.https_port} {region}"
    from edgeway.edge.hooks import Unenforced
    from edgeway.edge.modules import traffic_policy as tp
    for phase, text, said in (
            ("on_http_request", "conn.geo.country == 'FR'", "conn.geo"),
            ("on_http_request", "conn.bytes_in > 10", "conn.bytes_in"),
            ("on_tcp_connect", "conn.geo.city == ''", "conn.geo")):
        compiled = tp.compile({"value": json.dumps({phase: [{"expressions": [text], "actions": [
            {"type": "deny"}]}]})}, "r")
        assert isinstance(compiled, Unenforced) and said in compiled.what, (phase, text)
    counted = tp.compile({"value": json.dumps({"on_tcp_connect": [{"expressions": [
        "conn.bytes_in == 0 && conn.bytes_out == 0"], "actions": [{"type": "deny"}]}]})}, "r")
    assert isinstance(counted, tp.Policy) and counted.on_tcp_connect("192.0.2.1", 1) is False


def test_pooled_cloud_endpoints_share_their_url(srv: Server, token: str) -> None:
    """Cloud endpoints of one URL that all set pooling_enabled take its requests in turn; one
    that does not pool, an edge and an agent are refused the name while they hold it; the
    last one gone, the name is free again."""
    host = "pool.example.com"

    def answering(text: str) -> str:
        return policy(rule("true", {"type": "custom-response", "config": {"content": text}}))

    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        url = f"https://{host}"
        a = made(api, "/endpoints", {"type": "cloud", "url": url, "pooling_enabled": True,
                                     "traffic_policy": answering("a")})
        b = made(api, "/endpoints", {"type": "cloud", "url": url, "pooling_enabled": True,
                                     "traffic_policy": answering("b")})
        assert (a["pooling_enabled"], b["pooling_enabled"]) == (True, True)
        with EdgeClient(srv) as web:
            until(lambda: {web.get(f"{url}/").text for _ in range(4)} == {"a", "b"},
                  "both pooled endpoints answer")
        alone = api.post("/endpoints", json={"type": "cloud", "url": url,
                                             "traffic_policy": answering("c")})
        assert alone.status_code == 400 and "pooling_enabled true" in alone.text, alone.text
        assert alone.json()["error_code"] == "ERR_EDGEWAY_7122"
        r = api.patch(f"/endpoints/{a['id']}", json={"pooling_enabled": False})
        assert r.status_code == 400 and b["id"] in r.text, r.text
        edge = api.post("/edges/https", json={"hostports": [f"{host}:443"]})
        assert edge.status_code == 400 and "pooled cloud endpoints" in edge.text, edge.text
        taker = agent(srv, token, {"kind": "https", "forward": "http://127.0.0.1:9",
                                   "domain": host})
        try:
            assert "cloud endpoint" in taker.listeners[0]["error"], taker.listeners
        finally:
            taker.stop()
        assert api.delete(f"/endpoints/{a['id']}").status_code == 204
        with EdgeClient(srv) as web:
            until(lambda: {web.get(f"{url}/").text for _ in range(4)} == {"b"},
                  "the one left answers alone")
        assert api.delete(f"/endpoints/{b['id']}").status_code == 204
        edge = api.post("/edges/https", json={"hostports": [f"{host}:443"]})
        assert edge.status_code == 201, edge.text  # the name is free again
        assert api.delete(f"/edges/https/{edge.json()['id']}").status_code == 204


def test_racing_writers_never_share_a_name_between_a_pool_and_another_holder(
        srv: Server) -> None:
    """Pooled cloud endpoints, an endpoint alone and an HTTPS edge created at once on one
    name (PostgreSQL runs the writes side by side): whoever wins, the name ends up held by
    the pool or by one other holder, never both."""
    from concurrent.futures import ThreadPoolExecutor
    host = "race-pool.example.com"
    body = policy(rule("true", {"type": "custom-response", "config": {"content": "x"}}))
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})

    def create(i: int) -> tuple[str, int, str]:
        with srv.client() as api:
            if i == 0:
                r = api.post("/edges/https", json={"hostports": [f"{host}:443"]})
                return "edge", r.status_code, r.json().get("id", "")
            pooled = i != 1
            r = api.post("/endpoints", json={"type": "cloud", "url": f"https://{host}",
                                             "pooling_enabled": pooled,
                                             "traffic_policy": body})
            return ("pooled" if pooled else "alone"), r.status_code, r.json().get("id", "")

    for _ in range(3):
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(create, range(8)))
        won = {kind for kind, status, _id in results if status == 201}
        assert won in ({"pooled"}, {"alone"}, {"edge"}), results
        assert all(status in (201, 400) for _kind, status, _id in results), results
        with srv.client() as api:  # (clean up for the next round)
            for kind, status, id_ in results:
                if status == 201:
                    path = "/edges/https" if kind == "edge" else "/endpoints"
                    assert api.delete(f"{path}/{id_}").status_code == 204
