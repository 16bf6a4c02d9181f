"""SSH certificate authorities (key pairs the server generates and keeps) and SSH credentials
(public keys that authenticate to the SSH gateway). Host and user certificates signed by the
authorities are in ``ssh_certs``; the key handling itself is in ``pki.ssh``.

A CA's private key is stored sealed with the platform secret key (``ctx.sealer``, context
``CA_SEAL_CONTEXT``) in the member ``private_key``, which is never rendered.
"""

from __future__ import annotations

from typing import Any

from edgeway.catalog import checks
from edgeway.catalog.identity import _default_owner, _owner_field
from edgeway.catalog.model import Context, Field, Kind, standard
from edgeway.errors import Invalid
from edgeway.pki import ssh

DEFAULT_KEY_TYPE = "ed25519"
DEFAULT_CURVE = "p256"
DEFAULT_RSA_BITS = 4096
CA_SEAL_CONTEXT = "ssh_certificate_authorities.private_key"


def _key_type_member(value: str, _ctx: Context) -> str:
    low = value.strip().lower()
    if low and low not in ssh.KEY_TYPES:
        raise Invalid("private_key_type", f"'{value}' is not a key type; use rsa, ecdsa or "
                      f"ed25519 (default {DEFAULT_KEY_TYPE})", 215)
    return low


def _curve_member(value: str, _ctx: Context) -> str:
    if not value.strip():
        return ""
    try:
        return ssh.canonical_curve(value)
    except ssh.SSHKeyError as exc:
        raise Invalid("elliptic_curve", str(exc), 215) from None


def _key_size_member(value: int, _ctx: Context) -> int:
    if value not in (0, *ssh.RSA_SIZES):
        raise Invalid("key_size", f"{value} is not supported; RSA keys have 2048 or 4096 bits "
                      f"(default {DEFAULT_RSA_BITS})", 215)
    return value


def key_choice(doc: dict[str, Any]) -> tuple[str, str, int]:
    """(key type, curve, RSA bits) from the request; empty/0 members mean "the default".

    Without a type, a curve implies ecdsa and a key size implies rsa; otherwise ed25519.
    """
    kt, curve, size = (doc.get("private_key_type") or "", doc.get("elliptic_curve") or "",
                       doc.get("key_size") or 0)
    kt = kt or ("ecdsa" if curve else "rsa" if size else DEFAULT_KEY_TYPE)
    if curve and kt != "ecdsa":
        raise Invalid("elliptic_curve", f"applies to ecdsa keys only, but the key type is "
                      f"'{kt}'", 215)
    if size and kt != "rsa":
        raise Invalid("key_size", f"applies to rsa keys only, but the key type is '{kt}'", 215)
    curve = (curve or DEFAULT_CURVE) if kt == "ecdsa" else ""
    size = (size or DEFAULT_RSA_BITS) if kt == "rsa" else 0
    return kt, curve, size


def _check_ca(doc: dict[str, Any], _ctx: Context) -> None:
    key_choice(doc)


def _derive_ca(doc: dict[str, Any], ctx: Context, old: dict[str, Any] | None) -> dict[str, Any]:
    if old is not None:
        return {}
    kt, curve, size = key_choice(doc)
    key = ssh.generate(kt, curve, size)
    return {
        "private_key_type": kt, "elliptic_curve": curve, "key_size": size,
        "public_key": ssh.openssh_line(key.public_key()), "key_type": kt,
        "private_key": ctx.sealer.seal(ssh.private_pem(key), CA_SEAL_CONTEXT),
    }


SSH_CERTIFICATE_AUTHORITIES = Kind(
    collection="ssh_certificate_authorities", prefix="sshca",
    list_key="ssh_certificate_authorities", title="SSHCertificateAuthority",
    describe="SSH certificate authorities: the server generates and keeps the key pair and "
             "signs host and user certificates with it.",
    fields=(
        *standard(),
        Field("private_key_type", str, "rsa, ecdsa or ed25519; default ed25519 (or ecdsa when "
              "elliptic_curve is given, rsa when key_size is given)", default="",
              check=_key_type_member, response=False),
        Field("elliptic_curve", str, "ecdsa only: p256 (default), p384 or p521; secp256r1, "
              "secp384r1, secp521r1 also accepted", default="", check=_curve_member,
              response=False),
        Field("key_size", int, "rsa only: 2048 or 4096 (default 4096)", default=0,
              check=_key_size_member, response=False),
        Field("public_key", str, "the CA public key, one OpenSSH authorized-keys line",
              create="no", default=""),
        Field("key_type", str, "rsa, ecdsa or ed25519", create="no", default=""),
        Field("private_key", str, "the CA private key, sealed; never rendered", create="no",
              default="", response=False),
    ),
    check=_check_ca, derive=_derive_ca,
)


def parsed_key(member: str, value: str) -> ssh.ParsedKey:
    """A public key in any accepted form, or 400 naming ``member`` (611 empty, 612 invalid)."""
    if not value.strip():
        raise Invalid(member, "is empty; send a public key such as 'ssh-ed25519 AAAA... "
                      "comment'", 611)
    try:
        return ssh.parse_public_key(value)
    except ssh.SSHKeyError as exc:
        raise Invalid(member, str(exc), 612) from None


def public_key_member(value: str, _ctx: Context) -> str:
    return parsed_key("public_key", value).line


def _derive_credential(doc: dict[str, Any], ctx: Context,
                       old: dict[str, Any] | None) -> dict[str, Any]:
    out = _default_owner(doc, ctx, old)
    if old is None:
        out["fingerprint"] = parsed_key("public_key", doc["public_key"]).fingerprint
    return out


SSH_CREDENTIALS = Kind(
    collection="ssh_credentials", prefix="sshcr", list_key="ssh_credentials",
    title="SSHCredential",
    describe="Public keys that authenticate SSH clients to the SSH gateway, limited by an ACL.",
    unique=(("fingerprint",),),
    unique_msg="the SSH key {fingerprint} is already registered as an SSH credential; a key "
               "can belong to one credential only", unique_code=609,
    fields=(
        *standard(),
        Field("public_key", str, "the public key: an OpenSSH authorized-keys line "
              "('ssh-ed25519 AAAA... comment'), an RFC 4716 block or a PEM public key; "
              "returned as an authorized-keys line", create="required",
              check=public_key_member),
        Field("acl", list[str], "bind rules: '*' or 'bind:<domain|*.domain|host:port|k=v>'",
              update=True, default=list, check=checks.acl_rules),
        _owner_field(),
        Field("fingerprint", str, "SHA256 fingerprint of public_key (unique); not rendered",
              create="no", default="", response=False),
    ),
    derive=_derive_credential,
)

KINDS = (SSH_CERTIFICATE_AUTHORITIES, SSH_CREDENTIALS)
