"""Debian's Pebble (a small ACME server) on loopback for the managed-certificate tests: its
HTTPS listener gets a certificate from a CA made here (the server trusts it through
``--acme-ca-bundle``), its DNS questions go to the test resolver, and its http-01 requests to
the platform's public HTTP port. Issued certificates last an hour. Its roots come from the
management interface."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.domains.tlsprobe import UploadCA
from tests.server import free_port

VALIDITY = 3600  # seconds


@dataclass
class Pebble:
    directory: str
    ca_bundle: Path  # trusts Pebble's own HTTPS listener
    management: str

    def root(self) -> str:
        """Pebble's issuing root (PEM), from its management interface."""
        ctx = ssl.create_default_context(cafile=str(self.ca_bundle))
        with urllib.request.urlopen(f"{self.management}/roots/0", context=ctx) as r:
            return str(r.read().decode())


@contextmanager
def running(work: Path, http_port: int, dns: tuple[str, int]) -> Iterator[Pebble]:
    exe = shutil.which("pebble")
    if exe is None:
        pytest.fail("pebble is missing (scripts/test installs Debian's pebble)")
    ca = UploadCA()
    chain, key = ca.leaf("localhost", "127.0.0.1")
    (work / "pebble.pem").write_text(chain)
    (work / "pebble.key").write_text(key)
    (work / "ca.pem").write_text(ca.pem)
    port, mgmt = free_port(), free_port()
    (work / "pebble.json").write_text(json.dumps({"pebble": {
        "listenAddress": f"127.0.0.1:{port}", "managementListenAddress": f"127.0.0.1:{mgmt}",
        "certificate": str(work / "pebble.pem"), "privateKey": str(work / "pebble.key"),
        "httpPort": http_port, "tlsPort": free_port(), "ocspResponderURL": "",
        "externalAccountBindingRequired": False, "certificateValidityPeriod": VALIDITY}}))
    env = {"PEBBLE_VA_NOSLEEP": "1", "PEBBLE_WFE_NONCEREJECT": "0", "PEBBLE_AUTHZREUSE": "0",
           "PATH": "/usr/bin:/bin"}
    log = (work / "pebble.log").open("w")
    proc = subprocess.Popen([exe, "-config", str(work / "pebble.json"), "-dnsserver",
                             f"{dns[0]}:{dns[1]}"], stdout=log, stderr=subprocess.STDOUT,
                            env=env)
    pebble = Pebble(f"https://127.0.0.1:{port}/dir", work / "ca.pem",
                    f"https://127.0.0.1:{mgmt}")
    deadline = time.monotonic() + 20
    while True:
        try:
            pebble.root()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("pebble did not start:\n" + (work / "pebble.log").read_text())
            time.sleep(0.1)
    try:
        yield pebble
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
