"""The data directory holds the SQLite database, the platform secret key, the CA's sealed key
and the SSH host key: readable by the server's own user alone.

``prepare`` runs before anything is written there: the process umask becomes 077, so every
file and directory the server creates (the database and its -wal/-shm, key files, node id,
edge certificates) is created 0600 or 0700, never opened wider first. A directory an earlier
version (or an installer) left open to others is tightened once, with a warning.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger()
PRIVATE = 0o077  # the bits no one but the owner may have


def prepare(data_dir: Path) -> None:
    os.umask(PRIVATE)
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    opened: list[str] = []
    for path in (data_dir, *sorted(data_dir.rglob("*"))):
        st = path.lstat()
        if stat.S_ISLNK(st.st_mode) or not st.st_mode & PRIVATE:
            continue
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~PRIVATE)
        opened.append(str(path.relative_to(data_dir)))
    if opened:
        log.warning("data_dir_tightened", data_dir=str(data_dir), paths=opened[:20],
                    count=len(opened), why="readable by other users; now the owner's alone")
