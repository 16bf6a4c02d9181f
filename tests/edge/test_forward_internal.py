"""Internal endpoints and the traffic policy's ``forward-internal``: an agent binds a
``.internal`` name (the official SDK with ``.domain()``, the Edgeway agent with ``--url``); no
public listener serves it; an edge route's policy forwards to it, and the internal endpoint's
own policy runs too; an endpoint that is offline halts (502) or lets the policy go on; a
forwarding loop ends (508)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.test_oneliners import only_tunnel, spawn
from tests.edge.agents import EdgeClient, agent
from tests.edge.test_edges import made, route
from tests.server import Server, free_port

HOST = "front.example.com"


def forward(url: str, on_error: str = "halt", **extra: Any) -> dict[str, Any]:
    return {"type": "forward-internal", "config": {"url": url, "on_error": on_error, **extra}}


FRONT = {
    "on_http_request": [
        {"expressions": ["req.url.query == 'sdk'"], "actions": [
            {"type": "add-headers", "config": {"headers": {"X-Front": "yes"}}},
            forward("https://api.internal")]},
        {"expressions": ["req.url.query == 'agent'"],
         "actions": [forward("https://web.internal")]},
        {"expressions": ["req.url.query == 'gone'"],
         "actions": [forward("https://gone.internal")]},
        {"expressions": ["req.url.query == 'soft'"],
         "actions": [forward("https://gone.internal", "continue"),
                     {"type": "custom-response", "config": {"status_code": 299,
                                                            "content": "went on"}}]},
        {"expressions": ["req.url.query == 'loop'"],
         "actions": [forward("https://loop.internal")]},
    ],
    "on_http_response": [
        {"actions": [{"type": "add-headers", "config": {"headers": {"X-Front-Out": "1"}}}]}],
}
INNER = json.dumps({
    "on_http_request": [
        {"expressions": ["req.url.path == '/private'"],
         "actions": [{"type": "deny", "config": {"status_code": 403}}]},
        {"actions": [{"type": "add-headers", "config": {"headers": {"X-Inner": "yes"}}}]}],
    "on_http_response": [
        {"actions": [{"type": "add-headers", "config": {"headers": {"X-Inner-Out": "1"}}}]}],
})
LOOP = json.dumps({"on_http_request": [{"actions": [forward("https://loop.internal")]}]})


def test_internal_endpoints_are_reached_only_through_forward_internal(
        srv: Server, token: str, service: int, tmp_path: Path) -> None:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": HOST})
        edge = made(api, "/edges/https", {"hostports": [f"{HOST}:443"]})
        svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
        route(api, edge["id"], "path_prefix", "/", svc["id"],
              traffic_policy={"value": json.dumps(FRONT)})
        forward_to = f"http://127.0.0.1:{service}"
        sdk = agent(srv, token,
                    {"kind": "https", "forward": forward_to, "domain": "api.internal",
                     "policy": INNER},
                    {"kind": "https", "forward": forward_to, "domain": "loop.internal",
                     "policy": LOOP},
                    {"kind": "https", "forward": forward_to, "domain": "api.internal"},
                    {"kind": "https", "forward": forward_to, "domain": "*.svc.internal"})
        ours = spawn("http", str(service), "--url", "https://web.internal", "--authtoken",
                     token, "--server-addr", f"localhost:{srv.tunnel_port}", "--root-cas",
                     str(srv.data_dir / "ca.pem"), web=free_port())
        try:
            urls = sdk.urls
            assert urls[:2] == ["https://api.internal", "https://loop.internal"]
            assert "already bound" in sdk.listeners[2]["error"]  # one name, one claim
            assert "not a wildcard" in sdk.listeners[3]["error"]
            assert only_tunnel(ours)["public_url"] == "https://web.internal"
            listed = {e["url"]: e for e in api.get("/endpoints").json()["endpoints"]}
            assert listed["https://api.internal"]["bindings"] == ["internal"]
            with EdgeClient(srv) as web:
                # never from the public listeners, whatever the Host says (over HTTPS no
                # certificate is even served for the name)
                for name in ("api.internal", "API.INTERNAL", "web.internal."):
                    r = web.get(f"http://{name}/headers")
                    assert r.status_code == 404, (name, r.text)
                    with pytest.raises(httpx.ConnectError, match="not valid for"):
                        web.get(f"https://{name}/headers")
                base = f"https://{HOST}"
                r = web.get(f"{base}/headers?sdk")
                assert r.status_code == 200, r.text
                seen = dict(r.json()["headers"])
                assert seen["x-front"] == "yes" and seen["x-inner"] == "yes"
                assert r.headers["x-inner-out"] == "1" and r.headers["x-front-out"] == "1"
                assert web.get(f"{base}/private?sdk").status_code == 403  # the inner policy
                r = web.get(f"{base}/headers?agent")
                assert r.status_code == 200 and "x-inner" not in dict(r.json()["headers"])
                r = web.get(f"{base}/headers?gone")
                assert r.status_code == 502
                assert r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4019"
                r = web.get(f"{base}/headers?soft")
                assert (r.status_code, r.text) == (299, "went on")
                r = web.get(f"{base}/headers?loop")
                assert r.status_code == 508
                assert r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4020"
                assert web.get(f"{base}/headers").status_code == 200  # no rule: the route's
        finally:
            sdk.stop()
            ours.stop()
        with EdgeClient(srv) as web:  # the agent gone: its internal endpoint is offline
            assert web.get(f"https://{HOST}/headers?sdk").status_code == 502


def test_forward_internal_configurations_it_cannot_honour_are_refused() -> None:
    from edgeway.edge.hooks import Unenforced
    from edgeway.edge.modules import traffic_policy as tp
    req, tcp = "on_http_request", "on_tcp_connect"
    for phase, cfg, said in (
            (req, {"url": "https://api.example.com"}, "name ending in .internal"),
            (req, {"url": "tcp://db.internal:5432"}, "http:// or https://"),
            (req, {"url": "https://api.internal/v1"}, "no port or path"),
            (req, {"url": "https://api.internal", "binding": "public"}, "binding"),
            (req, {"url": "https://api.internal", "on_error": "retry"}, "on_error"),
            (tcp, {"url": "https://db.internal"}, "tcp://db.internal:5432"),
            (tcp, {"url": "tcp://db.internal"}, "and a port"),
            (tcp, {"url": "tcp://db.example.com:5432"}, "name ending in .internal"),
            (tcp, {"url": "tcp://db.internal:5432/x"}, "tcp://db.internal:5432"),
            (tcp, {"url": "tcp://db.internal:5432", "binding": "public"}, "binding"),
            (tcp, {"url": "tcp://db.internal:5432", "on_error": "retry"}, "on_error")):
        compiled = tp.compile({"value": json.dumps({phase: [{"actions": [
            {"type": "forward-internal", "config": cfg}]}]})}, "r")
        assert isinstance(compiled, Unenforced) and said in compiled.what, (phase, cfg)
