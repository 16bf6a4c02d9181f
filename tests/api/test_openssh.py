"""Real OpenSSH tools read what the API issues: ``ssh-keygen -L`` on certificates, and an
``sshd`` that a client logs into with a user certificate while trusting the host certificate
through ``@cert-authority``."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from edgeway.pki import ssh
from tests.api.ssh_helpers import Body, cert_body, new_ca, ok
from tests.pki.material import (
    new_key,
    ssh_private,
    ssh_public,
)
from tests.server import free_port


def keygen(*args: str) -> str:
    out = subprocess.run(["ssh-keygen", *args], check=True, capture_output=True, text=True,
                         env={**os.environ, "TZ": "UTC"})
    return out.stdout


def fingerprint_of(path: Path) -> str:
    return keygen("-l", "-f", str(path)).split()[1]


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")
def test_ssh_keygen_reads_issued_certificates(api: httpx.Client, tmp_path: Path) -> None:
    for ca_type, using in (("ecdsa", "ecdsa-sha2-nistp256"), ("rsa", "rsa-sha2-512"),
                           ("ed25519", "ssh-ed25519")):
        ca = new_ca(api, private_key_type=ca_type, **({"key_size": 2048} if ca_type == "rsa"
                                                      else {}))
        (tmp_path / "ca.pub").write_text(ca["public_key"] + "\n")
        ca_fp = fingerprint_of(tmp_path / "ca.pub")
        host = ok(api.post("/ssh_host_certificates", json=cert_body(
            ca, principals=["host.example.com", "10.1.2.3"],
            valid_after="2030-01-01T00:00:00Z", valid_until="2031-06-01T12:00:00Z")))
        (tmp_path / "host-cert.pub").write_text(host["certificate"] + "\n")
        text = keygen("-L", "-f", str(tmp_path / "host-cert.pub"))
        assert "ssh-ed25519-cert-v01@openssh.com host certificate" in text
        assert f"Signing CA: {ca_type.upper()} {ca_fp} (using {using})" in text
        assert "Valid: from 2030-01-01T00:00:00 to 2031-06-01T12:00:00" in text
        assert "host.example.com" in text and "10.1.2.3" in text
        user = ok(api.post("/ssh_user_certificates", json=cert_body(
            ca, principals=["deploy"], critical_options={
                "force-command": "/usr/bin/uptime", "source-address": "10.0.0.0/8,192.0.2.7"},
            extensions={"permit-pty": "", "permit-port-forwarding": ""})))
        (tmp_path / "user-cert.pub").write_text(user["certificate"] + "\n")
        text = keygen("-L", "-f", str(tmp_path / "user-cert.pub"))
        assert "user certificate" in text and f"Signing CA: {ca_type.upper()} {ca_fp}" in text
        lines = [ln.strip() for ln in text.splitlines()]
        assert "force-command /usr/bin/uptime" in lines
        assert "source-address 10.0.0.0/8,192.0.2.7" in lines
        ext = lines[lines.index("Extensions:") + 1:]
        assert ext[:2] == ["permit-port-forwarding", "permit-pty"] and "deploy" in lines


SSHD = "/usr/sbin/sshd"


@pytest.fixture(scope="module")
def sshd() -> str:
    """/usr/sbin/sshd, installing openssh-server with apt-get if it is missing."""
    if os.geteuid() != 0:
        pytest.skip("sshd must run as root to log a user in")
    if not os.path.exists(SSHD) and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run("apt-get update -qq && apt-get install -y -qq openssh-server",
                       shell=True, env=env, capture_output=True, timeout=600, check=False)
    if not os.path.exists(SSHD) or shutil.which("ssh") is None:
        pytest.skip("openssh-server/openssh-client are not installed and could not be "
                    "installed with apt-get")
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    return SSHD


def write_key(path: Path, key: ssh.PrivateKey, cert: str) -> Path:
    path.write_text(ssh_private(key))
    path.chmod(0o600)
    path.with_name(path.name + ".pub").write_text(ssh_public(key) + "\n")
    path.with_name(path.name + "-cert.pub").write_text(cert + "\n")
    return path


def issue(api: httpx.Client, kind: str, ca: Body, key: ssh.PrivateKey, **extra: Any) -> str:
    return str(ok(api.post(f"/{kind}", json={
        "ssh_certificate_authority_id": ca["id"], "public_key": ssh_public(key), **extra}))[
        "certificate"])


def sshd_config(tmp: Path, port: int) -> Path:
    config = tmp / "sshd_config"
    config.write_text("\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {tmp}/host_key",
        f"HostCertificate {tmp}/host_key-cert.pub", f"TrustedUserCAKeys {tmp}/ca.pub",
        "AuthorizedKeysFile none", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "UsePAM no",
        "StrictModes no", "PidFile none", "LogLevel VERBOSE", ""]))
    return config


@contextmanager
def running_sshd(binary: str, tmp: Path, ca: Body, host_cert: str,
                 host_key: ssh.PrivateKey) -> Iterator[int]:
    """sshd on a free loopback port with ``host_cert``, trusting ``ca`` for user certificates."""
    tmp.mkdir()
    port = free_port()
    write_key(tmp / "host_key", host_key, host_cert)
    (tmp / "ca.pub").write_text(ca["public_key"] + "\n")
    config = sshd_config(tmp, port)
    subprocess.run([binary, "-t", "-f", str(config)], check=True)
    with (tmp / "sshd.log").open("w") as log:
        proc = subprocess.Popen([binary, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        assert proc.poll() is None, (tmp / "sshd.log").read_text()
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def ssh_run(tmp: Path, port: int, ca: Body, user_key: Path) -> subprocess.CompletedProcess[str]:
    """``ssh user@127.0.0.1 echo ok``, trusting host certificates of ``ca`` and nothing else."""
    known = tmp / "known_hosts"
    known.write_text(f"@cert-authority [127.0.0.1]:{port} {ca['public_key']}\n")
    return subprocess.run(
        ["ssh", "-F", "/dev/null", "-p", str(port), "-i", str(user_key),
         "-o", f"CertificateFile={user_key}-cert.pub", "-o", "IdentitiesOnly=yes",
         "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}",
         "-o", "GlobalKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
         "-o", "ConnectTimeout=10", f"{getpass.getuser()}@127.0.0.1", "echo ok"],
        capture_output=True, text=True, timeout=60, check=False)


def test_sshd_accepts_issued_certificates(api: httpx.Client, sshd: str, tmp_path: Path) -> None:
    ca, me = new_ca(api), getpass.getuser()
    users = {}
    for name, options in (("plain", {}), ("forced", {"force-command": "echo forced"}),
                          ("elsewhere", {"source-address": "10.0.0.0/8"})):
        key = new_key()
        cert = issue(api, "ssh_user_certificates", ca, key, principals=[me],
                     critical_options=options)
        users[name] = write_key(tmp_path / f"user_{name}", key, cert)
    host_key = new_key()
    good = issue(api, "ssh_host_certificates", ca, host_key, principals=["127.0.0.1"])
    with running_sshd(sshd, tmp_path / "good", ca, good, host_key) as port:
        done = ssh_run(tmp_path, port, ca, users["plain"])
        assert done.returncode == 0 and done.stdout == "ok\n", (
            done.stderr + (tmp_path / "good" / "sshd.log").read_text())
        assert ssh_run(tmp_path, port, ca, users["forced"]).stdout == "forced\n"
        denied = ssh_run(tmp_path, port, ca, users["elsewhere"])
        assert denied.returncode == 255 and "Permission denied" in denied.stderr
    other = issue(api, "ssh_host_certificates", ca, host_key,
                  principals=["elsewhere.example.com"])
    with running_sshd(sshd, tmp_path / "wrong", ca, other, host_key) as port:
        done = ssh_run(tmp_path, port, ca, users["plain"])
        assert done.returncode == 255 and done.stdout == ""
        assert "Host key verification failed" in done.stderr, done.stderr
        assert "not a listed principal" in done.stderr, done.stderr
