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
