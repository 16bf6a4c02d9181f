"""The certificate manager's job rows: an order whose job another node took over meanwhile
(this node's lease ran out) stores nothing; a DNS check retries a failed order at once only
when the failure was the user's DNS, and not more often than the first retry's back-off."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.domains import db
from tests.domains.conftest import Domains
from tests.domains.test_acme import QUEUED, issued, rd, until


def job(domains: Domains, id_: str) -> dict[str, Any]:
    """The job row: its doc, due time and claim."""
    found = queued(domains, id_)
    assert found is not None, f"no job row for {id_}"
    return found


def queued(domains: Domains, id_: str) -> dict[str, Any] | None:
    """The job row, or None while there is none yet (the manager writes it once it hears of
    the policy: after the API answered)."""
    rows = db.rows(domains.server, "SELECT doc, due, claimed_by, claimed_until FROM "
                   "managed_certificates WHERE id = ?", id_)
    if not rows:
        return None
    [(doc, due, by, until_)] = rows
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
        until(lambda: {"n": challenges(domains, made["id"])}, lambda d: d["n"] > 0, QUEUED)
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


def test_a_dns_check_retries_only_a_dns_failure_and_once_a_minute(domains: Domains) -> None:
    name = "plain.retry.acme.example"
    with domains.server.client() as api:
        made = api.post("/reserved_domains", json={
            "domain": name, "certificate_management_policy": None}).json()
        reader = api.post("/api_keys", json={"role": "read_only"}).json()["token"]
        domains.resolver.cnames[name] = made["cname_target"]
        domains.resolver.servfail.add(name)  # the DNS check cannot resolve: not the user's DNS
        api.patch(f"/reserved_domains/{made['id']}", json={
            "certificate_management_policy": {"authority": "letsencrypt"}})
    try:
        until(lambda: queued(domains, made["id"]), lambda j: j is not None
              and j["doc"].get("attempts") == 1 and j["claimed_by"] == "", QUEUED)
        shown = rd(domains, made["id"])["certificate_management_status"]["provisioning_job"]
        assert shown["error_code"] == "INTERNAL_ERROR", shown
    finally:
        domains.resolver.servfail.discard(name)

    def check() -> dict[str, Any]:
        """A DNS check by a read-only key (every record ok now); the job row after it."""
        with domains.server.client(reader) as api:
            r = api.get(f"/reserved_domains/{made['id']}/dns_check")
            assert r.status_code == 200 and r.json()["ok"] is True, r.text
        return job(domains, made["id"])

    # not a DNS failure: the order waits for its retry (a minute after the failure)
    row = check()
    assert row["due"] > time.time() + 30 and "retried_at" not in row["doc"]
    # a DNS failure retried a moment ago: not again within the first retry's minute
    doc = {**row["doc"], "error_code": "DNS_ERROR", "retried_at": int(time.time()) - 5}
    assert db.execute(domains.server, "UPDATE managed_certificates SET doc = ? WHERE id = ?",
                      json.dumps(doc), made["id"]) == 1
    assert check() == {**row, "doc": doc}
    # a minute later it is: the order goes on at once, and succeeds
    doc["retried_at"] = asked = int(time.time()) - 61
    assert db.execute(domains.server, "UPDATE managed_certificates SET doc = ? WHERE id = ?",
                      json.dumps(doc), made["id"]) == 1
    assert check()["doc"]["retried_at"] > asked + 60
    until(lambda: rd(domains, made["id"]), issued, QUEUED)
    settled = job(domains, made["id"])["doc"]
    assert settled["attempts"] == 0 and settled["error_code"] is None
    with domains.server.client() as api:
        assert api.delete(f"/reserved_domains/{made['id']}").status_code == 204
