"""Who an SSH client is, and who the gateway is.

Clients: a public key is an ``ssh_credentials`` row (found by its SHA-256 fingerprint, the
kind's unique key) whose owner is active; a user certificate is trusted when one of the
``ssh_certificate_authorities`` signed it (asyncssh then checks its validity, principals
against the login name, its critical options: ``source-address``, ``force-command``, and that
no unknown one is set; and the ``permit-port-forwarding`` extension on each forward).

The gateway: its host key, ``ssh_host_ed25519_key`` in the data directory, made on first
start (mode 0600, as sshd keeps its own); and, when ``--ssh-host-ca`` names an SSH
certificate authority, a host certificate that authority signs for the gateway's names, so
clients may trust ``@cert-authority`` instead of the bare key.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncssh

from edgeway import catalog
from edgeway.catalog.ssh import CA_SEAL_CONTEXT
from edgeway.pki import ssh
from edgeway.platform import Platform
from edgeway.store.repo import Repo
from edgeway.tunnel.admission import Admission, AuthFailed

CREDENTIALS = catalog.BY_COLLECTION["ssh_credentials"]
AUTHORITIES = catalog.BY_COLLECTION["ssh_certificate_authorities"]
HOST_KEY = "ssh_host_ed25519_key"
HOST_CERT_DAYS = 365  # a host certificate's validity; renewed with a month left
RENEW_DAYS = 30


@dataclass(frozen=True)
class Identity:
    """Who authenticated: an SSH credential (its ACL), or an SSH certificate authority (a
    certificate it signed: what the account can bind, as an ACL of ``*``)."""
    credential: str  # sshcr_... or sshca_...
    acl: tuple[str, ...]
    what: str  # for logs: the key's fingerprint, or the authority

    @property
    def certificate(self) -> bool:
        return self.credential.startswith(f"{AUTHORITIES.prefix}_")


def _blob(line: str) -> str:
    parts = line.split()
    return parts[1] if len(parts) > 1 else ""


class Keys:
    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    async def credential(self, key: asyncssh.SSHKey) -> Identity | None:
        """The SSH credential of a client key, or None (unknown, or its owner inactive)."""
        fingerprint = key.get_fingerprint("sha256")
        repo = Repo(self.platform.db.reader())
        found = await repo.docs_where(CREDENTIALS, "fingerprint", [fingerprint])
        if not found:
            return None
        id_, doc = found[0]
        try:
            await Admission.owner_active(repo, str(doc.get("owner_id") or ""))
        except AuthFailed:
            return None
        return Identity(id_, tuple(doc.get("acl") or ()), fingerprint)

    async def authority(self, ca_key: asyncssh.SSHKey) -> Identity | None:
        """The SSH certificate authority with public key ``ca_key``, or None."""
        blob = _blob(ca_key.export_public_key().decode())
        for id_, doc in await Repo(self.platform.db.reader()).all_docs(AUTHORITIES):
            if _blob(str(doc.get("public_key") or "")) == blob:
                return Identity(id_, ("*",), f"a certificate signed by {id_}")
        return None

    async def still_valid(self, identity: Identity) -> tuple[str, ...]:
        """The current ACL of a live session's identity; AuthFailed when it is gone."""
        repo = Repo(self.platform.db.reader())
        doc = await repo.get(AUTHORITIES if identity.certificate else CREDENTIALS,
                             identity.credential)
        if doc is None:
            what = "SSH certificate authority" if identity.certificate else "SSH credential"
            raise AuthFailed(f"the {what} {identity.credential} was deleted")
        if identity.certificate:
            return identity.acl
        await Admission.owner_active(repo, str(doc.get("owner_id") or ""))
        return tuple(doc.get("acl") or ())

    async def host_certificate(self, ca_id: str, key: asyncssh.SSHKey,
                               names: tuple[str, ...]) -> tuple[asyncssh.SSHCertificate,
                                                                datetime]:
        """A host certificate for ``key`` and ``names``, signed by the authority ``ca_id``,
        and when it expires. ValueError when that authority does not exist."""
        doc = await Repo(self.platform.db.reader()).get(AUTHORITIES, ca_id)
        if doc is None:
            raise ValueError(f"--ssh-host-ca: no SSH certificate authority {ca_id} (create it "
                             "with POST /ssh_certificate_authorities first)")
        ca = ssh.load_private(self.platform.sealer.open(str(doc["private_key"]),
                                                        CA_SEAL_CONTEXT))
        public = ssh.parse_public_key(key.export_public_key().decode()).key
        now = datetime.now(UTC)
        until = now + timedelta(days=HOST_CERT_DAYS)
        line = ssh.sign(ca, ssh.CertRequest(public, True, list(names), now - timedelta(hours=1),
                                            until, "edgeway ssh gateway"))
        return asyncssh.import_certificate(line), until


def host_key(data_dir: Path) -> asyncssh.SSHKey:
    """The gateway's host key, made on first use (and never replaced: clients pin it)."""
    path = data_dir / HOST_KEY
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        key = asyncssh.generate_private_key("ssh-ed25519", comment="edgeway ssh gateway")
        with contextlib.suppress(FileExistsError):  # (another process made it meanwhile)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(key.export_private_key())
            path.with_name(HOST_KEY + ".pub").write_bytes(key.export_public_key())
    return asyncssh.read_private_key(path)
