"""The SSH gateway's tests: the real OpenSSH client against the shared server of each backend
(``server``), a service behind the tunnels, and a key pair per test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.edge import upstream
from tests.server import Server
from tests.sshgw.client import SshUser

if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
    pytest.fail("the OpenSSH client is missing (scripts/test installs openssh-client)",
                pytrace=False)


@pytest.fixture(scope="module")
def service() -> Iterator[int]:
    with upstream.running("svc") as port:
        yield port


@pytest.fixture
def user(server: Server, tmp_path: Path) -> Iterator[SshUser]:
    someone = SshUser(server, tmp_path / "ssh")
    try:
        yield someone
    finally:
        someone.close()
