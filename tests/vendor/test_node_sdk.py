"""The official Node SDK ``@ngrok/ngrok`` 1.7.0 with a circuit breaker on its endpoint: after
enough server errors the edge answers 503 itself until the breaker's pause is over; an error
threshold out of range is refused at bind."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.edge.agents import EdgeClient
from tests.server import Server
from tests.stub_http import StubHandler, serving
from tests.vendor.peers import PEERS, need

SCRIPT = """
const ngrok = require(process.argv[1]);  // (node -e: no script path in argv)
const fs = require('fs');
(async () => {
  const [token, addr, ca, forward] = process.argv.slice(2);
  const session = await new ngrok.SessionBuilder().authtoken(token).serverAddr(addr)
    .caCert(fs.readFileSync(ca)).connect();
  const out = [];
  for (const ratio of [0.5, 1.5]) {
    try {
      const l = await session.httpEndpoint().circuitBreaker(ratio).listenAndForward(forward);
      out.push({url: l.url()});
    } catch (e) { out.push({error: String(e)}); }
  }
  console.log(JSON.stringify(out));
  process.stdin.on('end', async () => { await session.close(); process.exit(0); });
  process.stdin.resume();
})();
"""


class _Failing(StubHandler):
    def do_GET(self) -> None:
        self.send(500 if self.path.startswith("/fail") else 200, {}, b"ok")


@contextmanager
def _failing() -> Iterator[int]:
    with serving(_Failing) as httpd:
        yield httpd.server_address[1]


def test_circuit_breaker_from_the_node_sdk(server: Server) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing (apt-get install nodejs)")
    with server.client() as api, _failing() as port:
        token = api.post("/credentials", json={}).json()["token"]
        proc = subprocess.Popen(
            [node, "-e", SCRIPT, str(need(PEERS / "@ngrok" / "ngrok")), token,
             f"localhost:{server.tunnel_port}", str(server.data_dir / "ca.pem"),
             f"http://127.0.0.1:{port}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            bound, refused = json.loads(proc.stdout.readline())
            assert "error threshold must be a ratio" in refused["error"], refused
            url = bound["url"]
            with EdgeClient(server) as web:
                assert web.get(url + "/fine").status_code == 200
                # 20 requests (the breaker's default volume), 19 of them failed: it trips
                statuses = [web.get(url + "/fail").status_code for _ in range(19)]
                assert statuses == [500] * 19
                r = web.get(url + "/fine")  # the upstream would answer: the breaker does
                assert r.status_code == 503
                assert r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4011"
                assert r.headers["retry-after"] == "10"
        finally:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            proc.wait(20)
            proc.stdout.close()


INTERNAL = """
const ngrok = require(process.argv[1]);
const fs = require('fs');
(async () => {
  const [token, addr, ca, forward, domain] = process.argv.slice(2);
  const session = await new ngrok.SessionBuilder().authtoken(token).serverAddr(addr)
    .caCert(fs.readFileSync(ca)).connect();
  const l = await session.httpEndpoint().domain(domain).listenAndForward(forward);
  console.log(JSON.stringify({url: l.url()}));
  process.stdin.on('end', async () => { await session.close(); process.exit(0); });
  process.stdin.resume();
})();
"""


def test_an_internal_endpoint_of_the_node_sdk_behind_forward_internal(server: Server) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing (apt-get install nodejs)")
    front = "front-node.example.com"
    with server.client() as api, _failing() as port:
        token = api.post("/credentials", json={}).json()["token"]
        assert api.post("/reserved_domains", json={"domain": front}).status_code == 201
        edge = api.post("/edges/https", json={"hostports": [f"{front}:443"]}).json()["id"]
        answer = api.post("/backends/http_response", json={"body": "not forwarded",
                                                           "status_code": 200}).json()["id"]
        policy = json.dumps({"on_http_request": [{"actions": [
            {"type": "forward-internal", "config": {"url": "https://node.internal"}}]}]})
        assert api.post(f"/edges/https/{edge}/routes", json={
            "match_type": "path_prefix", "match": "/", "backend": {"backend_id": answer},
            "traffic_policy": {"value": policy}}).status_code == 201
        proc = subprocess.Popen(
            [node, "-e", INTERNAL, str(need(PEERS / "@ngrok" / "ngrok")), token,
             f"localhost:{server.tunnel_port}", str(server.data_dir / "ca.pem"),
             f"http://127.0.0.1:{port}", "node.internal"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            assert json.loads(proc.stdout.readline()) == {"url": "https://node.internal"}
            with EdgeClient(server) as web:
                r = web.get(f"https://{front}/fine")
                assert (r.status_code, r.text) == (200, "ok")  # the upstream's, not the route's
                assert web.get("http://node.internal/fine").status_code == 404
        finally:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.close()
            proc.wait(20)
            proc.stdout.close()
