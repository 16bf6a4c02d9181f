"""Helpers shared by the SSH API tests."""

from __future__ import annotations

from typing import Any

import httpx

from tests.pki.material import ssh_public_key

Body = dict[str, Any]


def ok(r: httpx.Response, status: int = 201) -> Body:
    assert r.status_code == status, r.text
    body: Body = r.json()
    return body


def refused(r: httpx.Response, member: str, code: int) -> str:
    """Assert a 400 with ``code`` whose message names ``member``; return the message."""
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error_code"].endswith(f"_{code}"), body
    assert f"'{member}'" in body["msg"], body
    return str(body["msg"])


def new_ca(api: httpx.Client, **body: Any) -> Body:
    return ok(api.post("/ssh_certificate_authorities", json=body))


def cert_body(ca: Body, **extra: Any) -> Body:
    return {"ssh_certificate_authority_id": ca["id"], "public_key": ssh_public_key(), **extra}
