"""One platform CA for a cluster. The first node to start puts its CA (the certificate and
the key sealed with the platform's secret key) in the database; every other node adopts it,
replacing the one in its data directory, whose certificates issued by the old CA (the tunnel
listener's, the edge's) are then issued again. Agents thus trust one CA whichever node they
reach, and nodes recognise each other's certificates."""

from __future__ import annotations

import shutil
from pathlib import Path

import structlog

from edgeway.pki import platform_ca
from edgeway.pki.seal import Sealer, SealError
from edgeway.store.db import Database, UniqueViolation
from edgeway.store.repo import Repo

log = structlog.get_logger()
PEM, KEY = "platform_ca_pem", "platform_ca_key_sealed"


async def _stored(db: Database, pem: str, key: str) -> tuple[str, str]:
    """The cluster's CA, this one stored when there is none yet."""
    for _ in range(3):  # (two nodes storing theirs at once: one wins, the other reads it)
        try:
            async with db.write() as tx:
                repo = Repo(tx)
                found, sealed = await repo.setting(PEM), await repo.setting(KEY)
                if found is not None and sealed is not None:
                    return found, sealed
                await repo.put_setting(PEM, pem)
                await repo.put_setting(KEY, key)
                return pem, key
        except UniqueViolation:
            continue
    raise RuntimeError("could not read the cluster's platform CA")


async def share(db: Database, data_dir: Path, sealer: Sealer) -> bool:
    """Make the data directory's CA the cluster's; True when it was replaced."""
    platform_ca.authority(data_dir, sealer)
    pem_path, key_path = data_dir / "ca.pem", data_dir / "ca.key.sealed"
    pem, key = await _stored(db, pem_path.read_text(), key_path.read_text())
    if pem == pem_path.read_text():
        return False
    try:
        sealer.open(key, "ca")
    except SealError:
        raise ValueError("the cluster's platform CA is sealed with another secret key: give "
                         "every node the same EDGEWAY_SECRET_KEY") from None
    pem_path.write_text(pem)
    platform_ca.write_private(key_path, key.encode())
    for issued in ("tunnel.pem", "tunnel.key"):
        (data_dir / issued).unlink(missing_ok=True)
    shutil.rmtree(data_dir / "edge-certs", ignore_errors=True)
    log.info("platform_ca_adopted", reason="this node joined a cluster with a CA of its own")
    return True
