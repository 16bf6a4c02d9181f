"""The spec's site-to-site flow, steps 2, 4 and 6 (and the authtoken of step 7), called the
way a user would: plain HTTP with the API key from the first start."""

from __future__ import annotations

import httpx

from tests.server import Server, trust


def test_site_to_site_steps(server: Server) -> None:
    headers = {"Authorization": f"Bearer {server.token}", "Edgeway-Version": "2",
               "Content-Type": "application/json"}
    with httpx.Client(base_url=server.base_url, headers=headers, verify=trust()) as c:
        # Step 2: the custom agent ingress; save ns_targets and region_domains.
        r = c.post("/agent_ingresses", json={"description": "acme connect",
                                             "domain": "connect.acme-s2s.com"})
        assert r.status_code == 201, r.text
        ingress = r.json()
        assert ingress["id"].startswith("agin_")
        assert len(ingress["ns_targets"]) == 4
        assert "tunnel.us.connect.acme-s2s.com" in ingress["region_domains"]
        assert all(d.startswith("tunnel.") and d.endswith(".connect.acme-s2s.com")
                   for d in ingress["region_domains"])

        # Step 4: the wildcard domain of the site, with its two CNAME targets.
        r = c.post("/reserved_domains", json={"domain": "*.site1.acme-s2s.com", "region": ""})
        assert r.status_code == 201, r.text
        domain = r.json()
        assert domain["id"].startswith("rd_") and domain["domain"] == "*.site1.acme-s2s.com"
        assert domain["cname_target"] and domain["acme_challenge_cname_target"]
        assert domain["cname_target"] != domain["acme_challenge_cname_target"]
        policy = domain["certificate_management_policy"]
        assert set(policy) == {"authority", "private_key_type"}
        job = domain["certificate_management_status"]["provisioning_job"]
        assert set(job) == {"error_code", "msg", "started_at", "retries_at"}

        # Step 6: the bot user that will own the site's authtoken.
        r = c.post("/bot_users", json={"name": "site1-agent"})
        assert r.status_code == 201, r.text
        bot = r.json()
        assert bot["id"].startswith("bot_") and bot["active"] is True

        # Step 7 (the dashboard step, here through the API): the bot's authtoken.
        r = c.post("/credentials", json={"owner_id": bot["id"], "description": "site1",
                                          "acl": ["bind:*.site1.acme-s2s.com"]})
        assert r.status_code == 201, r.text
        cred = r.json()
        assert cred["owner_id"] == bot["id"] and cred["acl"] == ["bind:*.site1.acme-s2s.com"]
        assert cred["token"]

        listed = c.get("/agent_ingresses").json()["ingresses"]
        assert ingress["id"] in [i["id"] for i in listed]
