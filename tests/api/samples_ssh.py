"""Generic-suite test data for SSH CAs, SSH certificates and credentials, TLS certificates."""

from __future__ import annotations

import httpx

from tests.api.samples import Body, Sample, created
from tests.pki.material import ssh_public_key, tls_chain


def _ca(api: httpx.Client) -> str:
    return str(created(api, "/ssh_certificate_authorities",
                       {"private_key_type": "ed25519"})["id"])


def _host_cert(api: httpx.Client) -> Body:
    return {"ssh_certificate_authority_id": _ca(api), "public_key": ssh_public_key(),
            "principals": ["host.example.com", "192.0.2.1"]}


def _user_cert(api: httpx.Client) -> Body:
    return {"ssh_certificate_authority_id": _ca(api), "public_key": ssh_public_key(),
            "principals": ["deploy"], "critical_options": {"source-address": "10.0.0.0/8"},
            "valid_until": "2099-01-01T00:00:00Z"}


def _tls(_api: httpx.Client) -> Body:
    chain = tls_chain()
    return {"certificate_pem": chain.pem, "private_key_pem": chain.key}


SAMPLES: dict[str, Sample] = {
    "ssh_certificate_authorities": Sample(
        lambda _a: {"private_key_type": "ecdsa", "elliptic_curve": "p256"}),
    "ssh_credentials": Sample(lambda _a: {"public_key": ssh_public_key(), "acl": ["*"]},
                              {"description": "laptop", "acl": ["bind:*.example.com"]}),
    "ssh_host_certificates": Sample(_host_cert),
    "ssh_user_certificates": Sample(_user_cert),
    "tls_certificates": Sample(_tls),
}
