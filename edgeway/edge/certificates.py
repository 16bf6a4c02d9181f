"""Which stored certificates the edge serves instead of the platform CA's: a reserved
domain's ``certificate_id`` (uploaded, or issued by its certificate management policy) for
its name, and an agent ingress's issued certificate for its region domains (on the tunnel
listener). Read with the routing snapshot, so a new or renewed certificate is served by the
next handshake after the snapshot reloads (at once on this node, within its refresh period on
the others)."""

from __future__ import annotations

from typing import Any

from edgeway import catalog
from edgeway.pki.platform_ca import ServedCert
from edgeway.store.acme import AcmeStore
from edgeway.store.db import Database
from edgeway.store.repo import Repo

TLS = catalog.BY_COLLECTION["tls_certificates"]


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
