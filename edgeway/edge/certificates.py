"""Which stored certificates the edge serves instead of the platform CA's: a reserved
domain's ``certificate_id`` (uploaded, or issued by its certificate management policy) for
its name, and an agent ingress's issued certificate for its region domains (on the tunnel
listener). Read with the routing snapshot, so a new or renewed certificate is served by the
next handshake after the snapshot reloads (at once on this node, within its refresh period on
the others). Also the ACME http-01 answers of the plain HTTP listener, read from the store
on each such request (whichever node the CA reaches)."""

from __future__ import annotations

import re
from typing import Any

from edgeway import catalog
from edgeway.edge.pages import Fixed, page
from edgeway.pki.platform_ca import ServedCert
from edgeway.store.acme import AcmeStore
from edgeway.store.db import Database, DatabaseUnavailable
from edgeway.store.repo import Repo

TLS = catalog.BY_COLLECTION["tls_certificates"]
CHALLENGES = b"/.well-known/acme-challenge/"  # (the router asks only for targets under it)
CHALLENGE = re.compile(rb"/\.well-known/acme-challenge/([A-Za-z0-9_-]{16,128})")


async def http01(db: Database, method: bytes, target: bytes) -> Fixed | None:
    """The key authorization for ``GET /.well-known/acme-challenge/<token>``, when a
    certificate order of this platform waits for it; None for any other request."""
    found = CHALLENGE.fullmatch(target) if method in (b"GET", b"HEAD") else None
    if found is None:
        return None
    try:
        answer = await AcmeStore(db).http_answer(found.group(1).decode())
    except DatabaseUnavailable:  # (the CA asks again: a clear refusal, not a dropped line)
        return page(503, "Not available", "The platform cannot read its certificate orders "
                    "right now; try again.", 4017, (("Retry-After", "5"),))
    if answer is None:
        return None
    return Fixed(200, (("Content-Type", "text/plain"),), answer.encode())


async def served(db: Database, domains: list[tuple[str, dict[str, Any]]]
                 ) -> dict[str, ServedCert]:
    repo = Repo(db.reader())
    wanted: list[tuple[str, str]] = [(str(doc["domain"]), str(doc["certificate_id"]))
                                     for _id, doc in domains if doc.get("certificate_id")]
    for job in (await AcmeStore(db).jobs()).values():
        if job.get("certificate_id") and job.get("kind") == "agent_ingresses":
            wanted += [(name, str(job["certificate_id"])) for name in job.get("names", ())]
    out: dict[str, ServedCert] = {}
    for name, cert_id in wanted:
        cert = await repo.get(TLS, cert_id)
        if cert is not None:
            out[name] = ServedCert(cert_id, str(cert["certificate_pem"]),
                                   str(cert["private_key_pem"]))
    return out
