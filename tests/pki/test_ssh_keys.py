"""pki.ssh: every accepted public-key form, refusals, fingerprints, signing, and a fuzzer proving
that nothing but ``SSHKeyError`` comes out of the parser."""

from __future__ import annotations

import base64
import contextlib
import shutil
import struct
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeway.pki import ssh
from tests.pki.material import new_key, pem_public, ssh_public

KINDS = ["ed25519", "ecdsa", "rsa"]


@pytest.mark.parametrize("kind", KINDS)
def test_line_pem_and_pkcs1_forms_give_the_same_key(kind: str) -> None:
    key = new_key(kind)
    line = ssh_public(key)
    a = ssh.parse_public_key(f"  {line} alice@laptop \n")
    b = ssh.parse_public_key(pem_public(key))
    assert a.line == f"{line} alice@laptop" and b.line == line
    assert a.fingerprint == b.fingerprint and a.key_type == b.key_type == kind
    if isinstance(key, rsa.RSAPrivateKey):
        pkcs1 = key.public_key().public_bytes(serialization.Encoding.PEM,
                                              serialization.PublicFormat.PKCS1).decode()
        assert ssh.parse_public_key(pkcs1).fingerprint == a.fingerprint


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen not installed")
@pytest.mark.parametrize("kind", KINDS)
def test_matches_ssh_keygen(tmp_path: Path, kind: str) -> None:
    """Fingerprints equal ``ssh-keygen -l``; the RFC 4716 export of ``ssh-keygen -e`` parses."""
    path = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "me@host", "-f", str(path)],
                   check=True)
    pub = path.with_suffix(".pub").read_text()
    listed = subprocess.run(["ssh-keygen", "-l", "-f", f"{path}.pub"], check=True,
                            capture_output=True, text=True).stdout.split()[1]
    rfc = subprocess.run(["ssh-keygen", "-e", "-f", f"{path}.pub"], check=True,
                         capture_output=True, text=True).stdout
    assert rfc.startswith("---- BEGIN SSH2 PUBLIC KEY ----")
    assert ssh.parse_public_key(pub).fingerprint == listed
    assert ssh.parse_public_key(rfc).fingerprint == listed
    assert ssh.parse_public_key(rfc).line == pub.rsplit(" ", 1)[0]


def _blob(*parts: bytes) -> str:
    return base64.b64encode(b"".join(struct.pack(">I", len(p)) + p for p in parts)).decode()


def _dsa_line() -> str:
    return f"ssh-dss {_blob(b'ssh-dss', b'p', b'q', b'g', b'y')}"


REFUSED = {
    "": "empty",
    "ssh-ed25519": "authorized-keys format",
    "ssh-ed25519 !!!notbase64": "not base64",
    "ssh-ed25519 AAAA": "too short",
    "ssh-ed25519 AAAAA": "not valid base64",
    f"ssh-rsa {_blob(b'ssh-ed25519', b'x' * 32)}": "says 'ssh-rsa'",
    f"ssh-ed25519 {_blob(b'ssh-ed25519', b'short')}": "not a valid ssh-ed25519 key",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----": "private",
    "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----": "PEM",
    "---- BEGIN SSH2 PUBLIC KEY ----\nAAAA\n": "RFC 4716",
    "x" * 20000: "longer than",
    "from=\"1.2.3.4\" ssh-ed25519 AAAA": "authorized-keys format",
}


@pytest.mark.parametrize("text", list(REFUSED), ids=range(len(REFUSED)))
def test_refusals_say_why(text: str) -> None:
    with pytest.raises(ssh.SSHKeyError, match=REFUSED[text]):
        ssh.parse_public_key(text)


def test_unsupported_and_weak_keys() -> None:
    with pytest.raises(ssh.SSHKeyError, match="'ssh-dss' key"):
        ssh.parse_public_key(_dsa_line())
    weak = rsa.generate_private_key(65537, 1024)
    with pytest.raises(ssh.SSHKeyError, match="1024-bit RSA"):
        ssh.parse_public_key(ssh_public(weak))
    with pytest.raises(ssh.SSHKeyError, match="single line"):
        ssh.parse_public_key(ssh_public(new_key()) + " a\x00b")


def test_curves_and_generation() -> None:
    assert [ssh.canonical_curve(n) for n in ("secp384r1", "P-521", "p256")] == \
        ["p384", "p521", "p256"]
    with pytest.raises(ssh.SSHKeyError, match="p256, p384 or p521"):
        ssh.canonical_curve("p999")
    for kind, curve in (("ecdsa", "p521"), ("ed25519", ""), ("rsa", "")):
        key = ssh.generate(kind, curve or "p256", 2048)
        assert ssh.key_type(key.public_key()) == kind
        assert ssh.load_private(ssh.private_pem(key)).public_key() == key.public_key()
    with pytest.raises(ssh.SSHKeyError):
        ssh.generate("rsa", key_size=1024)


@pytest.mark.parametrize("ca_kind", KINDS)
def test_signed_certificates_verify(ca_kind: str) -> None:
    ca = ssh.generate(ca_kind, "p384", 2048)
    subject = new_key("ed25519")
    req = ssh.CertRequest(
        public_key=subject.public_key(), host=False, principals=["alice", "bob"],
        valid_after=datetime(2026, 1, 1, tzinfo=UTC), valid_before=datetime(2027, 1, 1, tzinfo=UTC),
        key_id="kid", critical_options={"source-address": "10.0.0.0/8"},
        extensions={"permit-pty": ""})
    cert = serialization.load_ssh_public_identity(ssh.sign(ca, req).encode())
    assert isinstance(cert, serialization.SSHCertificate)
    cert.verify_cert_signature()
    assert cert.type == serialization.SSHCertificateType.USER
    assert cert.valid_principals == [b"alice", b"bob"] and cert.key_id == b"kid"
    assert cert.critical_options == {b"source-address": b"10.0.0.0/8"}
    assert cert.extensions == {b"permit-pty": b""}
    assert cert.valid_after == 1767225600 and cert.signature_key() == ca.public_key()


WIRE = st.sampled_from(ssh.WIRE_TYPES)
BLOBS = st.one_of(
    st.binary(max_size=600),
    st.builds(lambda t, rest: struct.pack(">I", len(t)) + t.encode() + rest, WIRE,
              st.binary(max_size=600)),
)
TEXTS = st.one_of(
    st.text(max_size=400),
    st.builds(lambda t, b, c: f"{t} {base64.b64encode(b).decode()} {c}", WIRE, BLOBS,
              st.text(max_size=20)),
    st.builds(lambda b, h: "---- BEGIN SSH2 PUBLIC KEY ----\n" + h + "\n"
              + base64.b64encode(b).decode() + "\n---- END SSH2 PUBLIC KEY ----", BLOBS,
              st.text(max_size=30)),
    st.builds(lambda label, b: f"-----BEGIN {label}-----\n{base64.b64encode(b).decode()}\n"
              f"-----END {label}-----\n",
              st.sampled_from(["PUBLIC KEY", "RSA PUBLIC KEY", "CERTIFICATE", "X"]), BLOBS),
)


@settings(max_examples=600, deadline=None)
@given(TEXTS)
def test_parser_raises_only_its_own_error(text: str) -> None:
    try:
        parsed = ssh.parse_public_key(text)
    except ssh.SSHKeyError:
        return
    assert ssh.parse_public_key(parsed.line).fingerprint == parsed.fingerprint


REAL = {kind: ssh_public(new_key(kind)) for kind in KINDS}


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(KINDS), st.integers(0, 400), st.binary(min_size=1, max_size=8))
def test_damaged_real_keys_raise_only_its_own_error(kind: str, at: int, junk: bytes) -> None:
    wire, b64 = REAL[kind].split()
    blob = bytearray(base64.b64decode(b64))
    pos = at % len(blob)
    blob[pos:pos + len(junk)] = junk
    with contextlib.suppress(ssh.SSHKeyError):
        ssh.parse_public_key(f"{wire} {base64.b64encode(bytes(blob)).decode()}")
