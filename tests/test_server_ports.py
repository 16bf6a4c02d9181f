"""The suite's own port helpers: a block handed out for a server's TCP tunnel range never
comes back from ``free_port`` or ``free_block``, so no server of the run listens inside
another server's range (two tests once failed when the walk came round to such a block)."""

from __future__ import annotations

import pytest

import tests.server as server


def test_a_block_is_never_handed_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "_taken", set())
    block = server.free_block(3)
    assert block == list(range(block[0], block[0] + 3))
    # the walk comes round to the block again, as it does for a server started after it
    monkeypatch.setattr(server, "_next_port", server._PORTS.index(block[0]) - 3)
    ports = [server.free_port() for _ in range(6)]
    assert not set(ports) & set(block), (ports, block)
    monkeypatch.setattr(server, "_next_port", server._PORTS.index(block[0]) - 1)
    again = server.free_block(3)
    assert not set(again) & set(block), (again, block)


def test_a_port_another_suite_holds_is_never_handed_out(tmp_path_factory: pytest.TempPathFactory,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two suites on one machine (a stress run beside a developer's run): a chunk of ports
    another process holds the lock of is skipped, and is free again when that process ends."""
    import subprocess
    import sys
    monkeypatch.setattr(server, "_taken", set())
    chunks = range(server._PORTS.start // server._CHUNK + 1, server._PORTS.stop // server._CHUNK)
    chunk = next(c for c in chunks if c not in server._held)  # one this process has not taken
    port = chunk * server._CHUNK - 1
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys\n"
         f"fd = os.open({str(server._CHUNKS / str(chunk))!r}, os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        theirs = range(chunk * server._CHUNK, (chunk + 1) * server._CHUNK)
        monkeypatch.setattr(server, "_next_port", server._PORTS.index(port))
        ports = [server.free_port() for _ in range(2 * server._CHUNK)]
        assert not set(ports) & set(theirs), sorted(set(ports) & set(theirs))
        assert not server.ours(theirs[0])
    finally:
        holder.communicate("")
    assert server.ours(theirs[0])  # (its lock went with the process)
