"""What a job leaves in the store: the resource's ``certificate_management_status``, and an
issued certificate as a ``tls_certificates`` resource (``issued_at`` set, key sealed like
every TLS key) that a reserved domain's ``certificate_id`` points at (an agent ingress's is
kept in its job). The certificate it replaces, if the platform issued it, is deleted once
nothing refers to it (another reserved domain may have been given it: a wildcard's
certificate serves its subdomains). Each write checks that the resource still has the policy
the job ran for; the certificate is stored in one transaction with its job row, and only
while this node still holds the job (a node whose lease ran out stores nothing: the job is
another node's now)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import structlog
from cryptography import x509

from edgeway import catalog, ids
from edgeway.acme import status
from edgeway.catalog.model import Context, Kind
from edgeway.platform import Platform
from edgeway.store import acme as acme_store
from edgeway.store.repo import Repo

log = structlog.get_logger()
TLS = catalog.BY_COLLECTION["tls_certificates"]


def _tls_doc(platform: Platform, chain: str, key: bytes, names: list[str]) -> dict[str, Any]:
    now = datetime.now(UTC).replace(microsecond=0)
    ctx = Context(platform.settings, now, "", True, platform.sealer)
    doc = {f.name: f.default_value() for f in TLS.fields if not f.transient}
    doc.update(certificate_pem=chain, private_key_pem=key.decode(),
               description=f"managed certificate for {', '.join(names)}"[:255])
    assert TLS.derive is not None
    doc.update(TLS.derive(doc, ctx, None))
    doc["issued_at"] = doc["created_at"] = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return doc


async def _drop_issued(repo: Repo, cert_id: str) -> bool:
    """(In a write transaction.) Delete a certificate the platform issued, unless a resource
    still refers to it; whether it was deleted."""
    doc = await repo.get(TLS, cert_id)
    if doc is None or not doc.get("issued_at") or await repo.links_to(cert_id):
        return False
    return await repo.delete(TLS, cert_id)


class _ClaimLost(Exception):
    """The job is no longer this node's: the transaction is rolled back."""


class Results:
    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    async def status(self, kind: Kind, id_: str, policy: dict[str, Any],
                     shown: dict[str, Any]) -> bool:
        async with self.platform.db.write() as tx:
            repo = Repo(tx)
            doc = await repo.get(kind, id_)
            if doc is None or doc.get("certificate_management_policy") != policy:
                return False
            doc["certificate_management_status"] = shown
            await repo.replace(kind, id_, doc)
        self.platform.changed(kind.collection)
        return True

    async def forget(self, cert_id: str) -> None:
        """Delete a certificate the platform issued once nothing refers to it any more."""
        async with self.platform.db.write() as tx:
            dropped = await _drop_issued(Repo(tx), cert_id)
        if dropped:
            self.platform.changed("tls_certificates")

    async def certificate(self, kind: Kind, id_: str, policy: dict[str, Any],
                          job: dict[str, Any], chain: str, key: bytes, renew_before: float,
                          node: str) -> dict[str, Any] | None:
        """Store the certificate, and the job's outcome (the members that describe it; the
        job released, due at its renewal) in the same transaction, while ``node`` holds the
        job. Those members, or None when nothing was stored: the resource lost its policy
        meanwhile, or the job is not this node's any more."""
        leaf = x509.load_pem_x509_certificate(chain.encode())
        issued = status.now()
        not_after = leaf.not_valid_after_utc.timestamp()
        cert_doc = _tls_doc(self.platform, chain, key, job["names"])
        cert_id = ids.new_id(TLS.prefix)
        renews = status.renewal(not_after, issued, renew_before)
        shown = status.status(renews, None)
        outcome = {"certificate_id": cert_id, "not_after": not_after, "issued": issued}
        try:
            async with self.platform.db.write() as tx:
                repo = Repo(tx)
                doc = await repo.get(kind, id_)
                if doc is None or doc.get("certificate_management_policy") != policy:
                    return None
                await repo.insert(TLS, cert_id, cert_doc)
                old = doc.get("certificate_id") if kind.collection == "reserved_domains" \
                    else job.get("certificate_id")
                if kind.collection == "reserved_domains":
                    doc["certificate_id"] = cert_id
                    await repo.set_links(kind, id_, [("certificate_id", cert_id)])
                doc["certificate_management_status"] = shown
                await repo.replace(kind, id_, doc)
                if old:
                    await _drop_issued(repo, str(old))
                settled = {**job, **outcome, "attempts": 0, "error_code": None}
                if not await acme_store.settle(tx, id_, node, settled, int(renews)):
                    raise _ClaimLost
        except _ClaimLost:
            log.warning("acme_claim_lost", id=id_, node=node, stored=False)
            return None
        for collection in (kind.collection, "tls_certificates", "managed_certificates"):
            self.platform.changed(collection)
        return outcome
