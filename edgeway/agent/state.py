"""Stable URLs across agent restarts: the tunnel id each config tunnel was bound with, kept in
``$XDG_STATE_HOME/edgeway/tunnel-ids.json`` (default ``~/.local/state/edgeway``) per server
and authtoken (a SHA-256 of both: the file holds no secret).

The server derives a generated name and TCP port from the credential and the tunnel id, and it
issues ids bound to the credential, so re-binding the saved id gets the same URL back. While an
agent runs a tunnel it holds a lock on that tunnel's id (``fcntl.flock`` on a file next to
the ids): a second agent on this machine starting the same tunnel name with the same authtoken
does not take the tunnel over, it binds a new id of its own (and keeps no record of it).
The lock file goes when its tunnel ends (``release``), and files left by agents that were
killed are removed when the next agent starts (``sweep``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import IO

import structlog

log = structlog.get_logger()


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "edgeway"


class TunnelIds:
    def __init__(self, server_addr: str, authtoken: str, directory: Path | None = None) -> None:
        self.dir = directory or state_dir()
        self.path = self.dir / "tunnel-ids.json"
        self.key = hashlib.sha256(f"{server_addr}\n{authtoken}".encode()).hexdigest()[:24]
        self._locks: dict[str, IO[bytes]] = {}

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def _lock_path(self, name: str) -> Path:
        return self.dir / f"tunnel-{self.key}-{hashlib.sha256(name.encode()).hexdigest()[:16]}.lock"

    def claim(self, name: str) -> bool:
        """Hold ``name``'s lock for this process; False when another agent holds it."""
        if name in self._locks:
            return True
        path = self._lock_path(name)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            f = _lock(path)
        except OSError as exc:
            log.warning("tunnel_ids_unavailable", path=str(self.dir), error=str(exc))
            return False
        if f is None:
            return False
        self._locks[name] = f
        return True

    def get(self, name: str) -> str:
        if not self.claim(name):
            return ""
        value = self._load().get(self.key, {}).get(name, "")
        return value if isinstance(value, str) else ""

    def put(self, name: str, tunnel_id: str) -> None:
        """Remember (or with "" forget) ``name``'s id; only while this process holds it."""
        if name not in self._locks:
            return
        with open(self.dir / "tunnel-ids.lock", "ab") as guard:  # writers one at a time
            fcntl.flock(guard, fcntl.LOCK_EX)
            self._write(name, tunnel_id)

    def _write(self, name: str, tunnel_id: str) -> None:
        doc = self._load()
        ids = doc.setdefault(self.key, {})
        if ids.get(name, "") == tunnel_id:
            return
        if tunnel_id:
            ids[name] = tunnel_id
        else:
            ids.pop(name, None)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
            tmp.replace(self.path)
        except OSError as exc:
            log.warning("tunnel_ids_unsaved", path=str(self.path), error=str(exc))
            with contextlib.suppress(OSError):
                tmp.unlink()

    def release(self, name: str | None = None) -> None:
        """Give up ``name``'s lock (None: every lock held), removing its file."""
        for held in [name] if name is not None else list(self._locks):
            f = self._locks.pop(held, None)
            if f is not None:
                with contextlib.suppress(OSError):
                    os.unlink(f.name)  # (still locked: see _lock)
                f.close()

    def sweep(self) -> None:
        """Remove the lock files left by agents that are gone (none holds their lock)."""
        with contextlib.suppress(OSError):
            for path in self.dir.glob("tunnel-*-*.lock"):
                with contextlib.suppress(OSError):
                    f = _lock(path)
                    if f is not None:
                        os.unlink(path)
                        f.close()


def _lock(path: Path) -> IO[bytes] | None:
    """The open, locked file at ``path``; None when another process holds it. A holder
    removes the file before it unlocks it, so a lock taken on a file no longer at ``path``
    is worthless: then the path is opened again."""
    while True:
        f = open(path, "ab")  # noqa: SIM115
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return None
        try:
            here = os.stat(path)
        except FileNotFoundError:
            here = None
        mine = os.fstat(f.fileno())
        if here is not None and (here.st_ino, here.st_dev) == (mine.st_ino, mine.st_dev):
            return f
        f.close()
