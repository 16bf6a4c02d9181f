"""The official JS API client ``@ngrok/ngrok-api`` 0.11.0, unchanged, in Node: it sends the
whole argument as the body, so an update carries the resource's ``id`` and a route's create
and update carry ``edge_id`` as well; Edgeway takes them when they agree with the path. Its
list call pages with the client's own query string (``beforeId``, in camel case) to the end,
each item once."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid

import pytest

from tests.server import Server
from tests.vendor.peers import PEERS, need

SCRIPT = """
const { Ngrok } = require(process.argv[1]);  // (node -e: no script path in argv)
(async () => {
  const [token, baseUrl, domain] = process.argv.slice(2);
  const c = new Ngrok({ apiToken: token, baseUrl });
  const out = {};
  const policy = await c.ipPolicies.create({ description: 'js' });
  out.updated = (await c.ipPolicies.update({ id: policy.id, description: 'js updated' }))
    .description;
  await c.reservedDomains.create({ domain });
  const edge = await c.edges.edgesHttps.create({ hostports: [domain + ':443'] });
  const route = await c.edges.edgesHttpsRoutes.create({
    edgeId: edge.id, matchType: 'path_prefix', match: '/' });
  out.route_edge = route.edgeId;
  out.edge = edge.id;
  const changed = await c.edges.edgesHttpsRoutes.update({
    edgeId: edge.id, id: route.id, match: '/v2', description: 'from js' });
  out.route_match = changed.match;
  try {
    await c.ipPolicies.update({ id: 'ipp_' + 'A'.repeat(27), description: 'nope' });
  } catch (e) { out.missing = e.statusCode || String(e); }
  for (let i = 0; i < 3; i++) await c.ipPolicies.create({ description: 'js page' });
  out.listed = (await c.ipPolicies.list(undefined, '2')).map(p => p.id);
  out.policy = policy.id;
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
"""


def test_the_js_client_updates_and_creates_routes(server: Server) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is missing (scripts/test installs it)")
    client = need(PEERS / "@ngrok" / "ngrok-api")
    domain = f"js-{uuid.uuid4().hex[:8]}.example.com"
    done = subprocess.run([node, "-e", SCRIPT, str(client), server.token, server.base_url,
                           domain], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["updated"] == "js updated"
    assert out["route_edge"] == out["edge"] and out["route_match"] == "/v2", out
    assert out["missing"] == 404 and out["policy"] in out["listed"], out
    with server.client() as api:
        ids, url = [], "/ip_policies?limit=100"
        while url:
            page = api.get(url).json()
            ids += [p["id"] for p in page["ip_policies"]]
            url = (page["next_page_uri"] or "").removeprefix(server.base_url)
        assert out["listed"][:len(ids)] == ids[:len(out["listed"])]  # (newest first, once)
        assert len(set(out["listed"])) == len(out["listed"]) >= 4
        routes = api.get(f"/edges/https/{out['edge']}").json()["routes"]
        assert [(r["match"], r["description"]) for r in routes] == [("/v2", "from js")]
