"""The certificate manager's job rows: an order whose job another node took over meanwhile
(this node's lease ran out) stores nothing; a DNS check retries a failed order at once only
when the failure was the user's DNS, and not more often than the first retry's back-off."""

from __future__ import annotations

import json
from typing import Any

from tests.domains import db
from tests.domains.conftest import Domains
from tests.domains.test_acme import rd, until


def job(domains: Domains, id_: str) -> dict[str, Any]:
    """The job row: its doc, due time and claim."""
    [(doc, due, by, until_)] = db.rows(
        domains.server, "SELECT doc, due, claimed_by, claimed_until FROM managed_certificates "
        "WHERE id = ?", id_)
    return {"doc": json.loads(doc), "due": int(due), "claimed_by": by,
            "claimed_until": int(until_)}


def challenges(domains: Domains, id_: str) -> int:
    return len(db.rows(domains.server, "SELECT key FROM acme_challenges WHERE owner_id = ?",
                       id_))


def test_an_order_whose_job_another_node_took_stores_nothing(domains: Domains) -> None:
    name, challenge = "*.lost.acme.example", "_acme-challenge.lost.acme.example"
    with domains.server.client() as api:
        made = api.post("/reserved_domains", json={
            "domain": name, "certificate_management_policy": None}).json()
        domains.resolver.cnames[challenge] = made["acme_challenge_cname_target"]
        domains.resolver.no_txt.add(challenge)  # (the order waits to see its TXT record)
        before = {c["id"] for c in api.get("/tls_certificates").json()["tls_certificates"]}
        r = api.patch(f"/reserved_domains/{made['id']}", json={
            "certificate_management_policy": {"authority": "letsencrypt"}})
        assert r.status_code == 200, r.text
    try:
        until(lambda: {"n": challenges(domains, made["id"])}, lambda d: d["n"] > 0)
        # the lease ran out and another node claimed the job while the order went on
        assert db.execute(domains.server, "UPDATE managed_certificates SET claimed_by = ? "
                          "WHERE id = ? AND claimed_by <> ''", "node-b", made["id"]) == 1
    finally:
        domains.resolver.no_txt.discard(challenge)
    lost = f'"acme_claim_lost","id":"{made["id"]}"'
    doc = until(lambda: rd(domains, made["id"]), lambda d: d["certificate"] is not None
                or lost in domains.server.log())
    assert doc["certificate"] is None  # (the other node's order will give it one)
    with domains.server.client() as api:  # no certificate was stored for it either
        after = {c["id"] for c in api.get("/tls_certificates").json()["tls_certificates"]}
    assert after == before
    row = job(domains, made["id"])
    assert row["claimed_by"] == "node-b" and "certificate_id" not in row["doc"]
    with domains.server.client() as api:
        assert api.delete(f"/reserved_domains/{made['id']}").status_code == 204
