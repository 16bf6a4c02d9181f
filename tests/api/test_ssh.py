"""SSH CAs, credentials and certificates over HTTP: generated and sealed CA keys and every
member rule (status, error code, member named). Real OpenSSH tools: test_openssh.py."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from edgeway.pki import ssh
from tests.api.ssh_helpers import Body, cert_body, new_ca, ok, refused
from tests.pki.material import (
    new_key,
    pem_public,
    ssh_private,
    ssh_public,
    ssh_public_key,
    stored_doc,
)
from tests.server import Server

CA_MEMBERS = {"id", "uri", "created_at", "description", "metadata", "public_key", "key_type"}


# --- certificate authorities ---------------------------------------------------------------

@pytest.mark.parametrize(("body", "prefix", "key_type"), [
    ({}, "ssh-ed25519 ", "ed25519"),
    ({"private_key_type": "", "elliptic_curve": "", "key_size": 0}, "ssh-ed25519 ", "ed25519"),
    ({"private_key_type": "ecdsa"}, "ecdsa-sha2-nistp256 ", "ecdsa"),
    ({"private_key_type": "ecdsa", "elliptic_curve": "secp384r1"}, "ecdsa-sha2-nistp384 ",
     "ecdsa"),
    ({"elliptic_curve": "p521"}, "ecdsa-sha2-nistp521 ", "ecdsa"),
    ({"private_key_type": "rsa", "key_size": 2048}, "ssh-rsa ", "rsa"),
])
def test_ca_key_types_and_defaults(api: httpx.Client, server: Server, body: Body, prefix: str,
                                   key_type: str) -> None:
    ca = new_ca(api, description="ops", **body)
    assert set(ca) == CA_MEMBERS and ca["key_type"] == key_type
    assert ca["public_key"].startswith(prefix)
    assert ssh.parse_public_key(ca["public_key"]).key_type == key_type
    listed = ok(api.get("/ssh_certificate_authorities"), 200)["ssh_certificate_authorities"]
    assert api.get(f"/ssh_certificate_authorities/{ca['id']}").json() == ca == listed[0]
    stored = stored_doc(server, "ssh_certificate_authorities", ca["id"])
    assert stored["private_key"].startswith("v1:") and "PRIVATE" not in str(stored)


def test_rsa_default_size_is_4096(api: httpx.Client) -> None:
    ca = new_ca(api, private_key_type="rsa")
    key = ssh.parse_public_key(ca["public_key"]).key
    assert isinstance(key, rsa.RSAPublicKey) and key.key_size == 4096


@pytest.mark.parametrize(("body", "member"), [
    ({"private_key_type": "ed25519", "key_size": 2048}, "key_size"),
    ({"private_key_type": "rsa", "elliptic_curve": "p256"}, "elliptic_curve"),
    ({"private_key_type": "ecdsa", "key_size": 4096}, "key_size"),
    ({"elliptic_curve": "p256", "key_size": 2048}, "key_size"),
    ({"private_key_type": "rsa", "key_size": 1024}, "key_size"),
    ({"key_size": 3072}, "key_size"),
    ({"private_key_type": "dsa"}, "private_key_type"),
    ({"elliptic_curve": "p192"}, "elliptic_curve"),
    ({"key_size": "2048"}, "key_size"),
])
def test_ca_bad_combinations(api: httpx.Client, body: Body, member: str) -> None:
    refused(api.post("/ssh_certificate_authorities", json=body), member, 215)


def test_ca_update_and_delete(api: httpx.Client) -> None:
    ca = new_ca(api)
    changed = ok(api.patch(f"/ssh_certificate_authorities/{ca['id']}",
                           json={"description": "d", "metadata": "m"}), 200)
    assert changed == {**ca, "description": "d", "metadata": "m"}
    r = api.patch(f"/ssh_certificate_authorities/{ca['id']}", json={"private_key_type": "rsa"})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_214")
    cert = ok(api.post("/ssh_host_certificates", json={
        "ssh_certificate_authority_id": ca["id"], "public_key": ssh_public_key()}))
    r = api.delete(f"/ssh_certificate_authorities/{ca['id']}")
    assert r.status_code == 400 and cert["id"] in r.json()["msg"]
    assert api.delete(f"/ssh_host_certificates/{cert['id']}").status_code == 204
    assert api.delete(f"/ssh_certificate_authorities/{ca['id']}").status_code == 204


# --- credentials -----------------------------------------------------------------------------

def test_credential_forms_are_normalised(api: httpx.Client, server: Server) -> None:
    key = new_key("ecdsa")
    line = ssh_public(key)
    made = ok(api.post("/ssh_credentials", json={"public_key": f" {line}  laptop\n"}))
    assert made["public_key"] == f"{line} laptop" and made["acl"] == []
    assert made["owner_id"].startswith("usr_")
    assert set(made) == {"id", "uri", "created_at", "description", "metadata", "public_key",
                         "acl", "owner_id"}
    assert stored_doc(server, "ssh_credentials", made["id"])["fingerprint"].startswith("SHA256:")
    other = new_key("rsa")
    pem = ok(api.post("/ssh_credentials", json={"public_key": pem_public(other)}))
    assert pem["public_key"] == ssh_public(other)


def test_same_key_twice_is_refused(api: httpx.Client) -> None:
    key = new_key()
    first = ok(api.post("/ssh_credentials", json={"public_key": ssh_public(key, "a")}))
    fingerprint = ssh.fingerprint(key.public_key())
    for again in (ssh_public(key, "other comment"), pem_public(key)):
        r = api.post("/ssh_credentials", json={"public_key": again})
        assert r.status_code == 400 and r.json()["error_code"].endswith("_609")
        assert fingerprint in r.json()["msg"]
    assert api.delete(f"/ssh_credentials/{first['id']}").status_code == 204
    ok(api.post("/ssh_credentials", json={"public_key": pem_public(key)}))


@pytest.mark.parametrize(("text", "code"), [
    ("", 611), ("   ", 611), ("not a key", 612), ("ssh-ed25519 AAAA", 612),
    ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", 612), (ssh_public_key() + "\nssh-ed25519 AAAA", 612),
    ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", 612),
    (ssh_private(new_key()), 612),
])
def test_credential_bad_keys(api: httpx.Client, text: str, code: int) -> None:
    msg = refused(api.post("/ssh_credentials", json={"public_key": text}), "public_key", code)
    assert "-----BEGIN" not in msg  # never echoes a (private) key back


def test_credential_acl_owner_and_update(api: httpx.Client, server: Server) -> None:
    refused(api.post("/ssh_credentials", json={"public_key": ssh_public_key(),
                                               "acl": ["*", "open:all"]}), "acl[1]", 600)
    refused(api.post("/ssh_credentials", json={}), "public_key", 1405)
    bot = ok(api.post("/bot_users", json={"name": "ssh-bot"}))
    mine = ok(api.post("/ssh_credentials", json={"public_key": ssh_public_key(),
                                                 "owner_id": bot["id"]}))
    assert mine["owner_id"] == bot["id"]
    r = api.post("/ssh_credentials", json={"public_key": ssh_public_key(), "owner_id": "x"})
    assert r.status_code == 400 and "owner_id" in r.json()["msg"]
    key = ok(api.post("/api_keys", json={"owner_id": bot["id"]}))
    admin = ok(api.post("/ssh_credentials", json={"public_key": ssh_public_key()}))["owner_id"]
    with server.client(key["token"]) as as_bot:
        r = as_bot.post("/ssh_credentials", json={"public_key": ssh_public_key(),
                                                  "owner_id": admin})
        assert r.status_code == 403 and r.json()["error_code"].endswith("_630")
    changed = ok(api.patch(f"/ssh_credentials/{mine['id']}",
                           json={"acl": ["bind:*.Example.com"], "description": "ci"}), 200)
    assert changed["acl"] == ["bind:*.example.com"] and changed["public_key"] == mine["public_key"]
    r = api.patch(f"/ssh_credentials/{mine['id']}", json={"public_key": ssh_public_key()})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_214")


# --- certificates ----------------------------------------------------------------------------

def test_host_certificate_defaults_and_signature(api: httpx.Client) -> None:
    ca = new_ca(api, private_key_type="ecdsa")
    before = datetime.now(UTC).replace(microsecond=0)
    made = ok(api.post("/ssh_host_certificates", json=cert_body(
        ca, principals=["Web.Example.com.", "127.0.0.1", "web.example.com"],
        valid_after="0001-01-01T00:00:00Z", valid_until="0001-01-01T00:00:00Z")))
    assert made["principals"] == ["web.example.com", "127.0.0.1"] and made["key_type"] == "ed25519"
    start = datetime.strptime(made["valid_after"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs((start - before).total_seconds()) < 60
    assert made["valid_until"] == start.replace(year=start.year + 1).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    cert = serialization.load_ssh_public_identity(made["certificate"].encode())
    assert isinstance(cert, serialization.SSHCertificate)
    cert.verify_cert_signature()
    assert ssh.openssh_line(cert.signature_key()) == ca["public_key"]
    assert cert.type == serialization.SSHCertificateType.HOST
    assert cert.valid_principals == [b"web.example.com", b"127.0.0.1"]
    assert "critical_options" not in made and "extensions" not in made
    changed = ok(api.patch(f"/ssh_host_certificates/{made['id']}", json={"metadata": "m"}), 200)
    assert changed == {**made, "metadata": "m"}
    r = api.patch(f"/ssh_host_certificates/{made['id']}", json={"principals": ["x.example"]})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_214")


def test_user_certificate_defaults(api: httpx.Client) -> None:
    ca = new_ca(api)
    made = ok(api.post("/ssh_user_certificates", json=cert_body(
        ca, principals=[], critical_options={}, extensions={},
        valid_after="2030-01-01T02:00:00+02:00")))
    assert made["principals"] == [] and made["critical_options"] == {}
    assert made["extensions"] == {"permit-X11-forwarding": "", "permit-agent-forwarding": "",
                                  "permit-port-forwarding": "", "permit-pty": "",
                                  "permit-user-rc": ""}
    assert (made["valid_after"], made["valid_until"]) == ("2030-01-01T00:00:00Z",
                                                          "2031-01-01T00:00:00Z")
    cert = serialization.load_ssh_public_identity(made["certificate"].encode())
    assert isinstance(cert, serialization.SSHCertificate)
    assert cert.valid_principals == [] and cert.type == serialization.SSHCertificateType.USER
    custom = ok(api.post("/ssh_user_certificates", json=cert_body(
        ca, extensions={"permit-pty": "", "login@example.com": "alice"})))
    assert custom["extensions"] == {"permit-pty": "", "login@example.com": "alice"}


@pytest.mark.parametrize(("member", "value"), [
    ("valid_after", "yesterday"), ("valid_after", "2026-13-01T00:00:00Z"),
    ("valid_after", "2026-02-30T00:00:00Z"), ("valid_until", "2030-01-01T00:00:00"),
    ("valid_until", "2030-01-01T00:00:00+25:00"), ("valid_after", "1969-12-31T23:59:59Z"),
    ("valid_until", "2030-01-01"), ("valid_after", "\uff12\uff10\uff13\uff10-01-01T00:00:00Z"),
])
def test_bad_timestamps(api: httpx.Client, member: str, value: str) -> None:
    ca = new_ca(api)
    for kind in ("ssh_host_certificates", "ssh_user_certificates"):
        refused(api.post(f"/{kind}", json=cert_body(ca, **{member: value})), member, 241)


def test_validity_order(api: httpx.Client) -> None:
    ca = new_ca(api)
    for after, until in (("2030-01-01T00:00:00Z", "2029-12-31T23:59:59Z"),
                         ("2030-01-01T00:00:00Z", "2030-01-01T01:00:00+01:00"),
                         (None, "2001-01-01T00:00:00Z")):
        body = cert_body(ca, valid_until=until, **({"valid_after": after} if after else {}))
        refused(api.post("/ssh_host_certificates", json=body), "valid_until", 241)


@pytest.mark.parametrize(("kind", "extra", "member"), [
    ("ssh_host_certificates", {"principals": ["ok.example.com", "bad host!"]}, "principals[1]"),
    ("ssh_host_certificates", {"principals": ["*"]}, "principals[0]"),
    ("ssh_user_certificates", {"principals": ["alice", "bob smith"]}, "principals[1]"),
    ("ssh_user_certificates", {"principals": ["a,b"]}, "principals[0]"),
    ("ssh_user_certificates", {"critical_options": {"permit-pty": ""}}, "critical_options"),
    ("ssh_user_certificates", {"critical_options": {"source-address": "10.0.0.1/8"}},
     "critical_options.source-address"),
    ("ssh_user_certificates", {"critical_options": {"source-address": "10.0.0.0/8,,"}},
     "critical_options.source-address"),
    ("ssh_user_certificates", {"critical_options": {"source-address": "anywhere"}},
     "critical_options.source-address"),
    ("ssh_user_certificates", {"critical_options": {"force-command": ""}},
     "critical_options.force-command"),
    ("ssh_user_certificates", {"extensions": {"permit-pty": "yes"}}, "extensions.permit-pty"),
    ("ssh_user_certificates", {"extensions": {"permit-everything": ""}}, "extensions"),
    ("ssh_host_certificates", {"public_key": "ssh-ed25519 nope"}, "public_key"),
])
def test_certificate_member_rules(api: httpx.Client, kind: str, extra: Body,
                                  member: str) -> None:
    ca = new_ca(api)
    refused(api.post(f"/{kind}", json=cert_body(ca, **extra)), member,
            612 if member == "public_key" else 215)


def test_certificate_authority_reference(api: httpx.Client) -> None:
    body = {"public_key": ssh_public_key()}
    for ca_id, code in ((f"sshca_{'0' * 27}", 228), (f"ipp_{'0' * 27}", 227), ("nope", 223)):
        refused(api.post("/ssh_user_certificates",
                         json={**body, "ssh_certificate_authority_id": ca_id}),
                "ssh_certificate_authority_id", code)
    refused(api.post("/ssh_host_certificates", json=body), "ssh_certificate_authority_id", 1405)
