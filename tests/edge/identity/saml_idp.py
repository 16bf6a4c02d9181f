"""A SAML identity provider for the login tests: pysaml2's ``Server`` in the IdP role (its
signatures made by the xmlsec1 binary), on loopback, in a thread.

- ``/metadata``: its EntityDescriptor (what the route's ``idp_metadata`` gets);
- ``/sso``: takes a signed AuthnRequest (HTTP-Redirect; the signature is checked against the
  SP metadata fetched from the edge), records it and shows a sign-in form; the form's POST
  answers with an auto-posting form carrying a response whose assertion is signed;
- ``/slo``: takes the SP's signed LogoutRequest and answers with a signed LogoutResponse.

Tests also make responses themselves (``respond``): IdP-initiated, for another audience,
or to tamper with.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT
from saml2.config import IdPConfig
from saml2.metadata import create_metadata_string
from saml2.saml import NAME_FORMAT_BASIC, NAMEID_FORMAT_PERSISTENT, NameID
from saml2.server import Server
from saml2.sigver import verify_redirect_signature

from tests.server import free_port
from tests.stub_http import Answer, StubHandler, serving

RSA_SHA256 = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256"
SHA256 = "http://www.w3.org/2001/04/xmlenc#sha256"
SHA1 = "http://www.w3.org/2000/09/xmldsig#rsa-sha1"
DIGEST_SHA1 = "http://www.w3.org/2000/09/xmldsig#sha1"


@dataclass
class Asked:
    id: str
    issuer: str
    force_authn: bool
    nameid_format: str
    relay: str


@dataclass
class Idp:
    base: str
    keys: Path
    users: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    asked: list[Asked] = field(default_factory=list)
    sps: list[str] = field(default_factory=list)  # SP metadata documents
    logged_out: list[str] = field(default_factory=list)  # status codes of SP logout answers
    server: Server | None = None

    def load(self, sp_metadata: str) -> None:
        self.sps.append(sp_metadata)
        self.server = Server(config=IdPConfig().load(self.config()))

    def config(self) -> dict[str, Any]:
        return {
            "entityid": f"{self.base}/metadata",
            "service": {"idp": {
                "endpoints": {
                    "single_sign_on_service": [(f"{self.base}/sso", BINDING_HTTP_REDIRECT)],
                    "single_logout_service": [(f"{self.base}/slo", BINDING_HTTP_REDIRECT)]},
                "policy": {"default": {"lifetime": {"minutes": 5}, "name_form":
                                       NAME_FORMAT_BASIC, "attribute_restrictions": None}},
                "name_id_format": [NAMEID_FORMAT_PERSISTENT],
                # (the redirect binding signs the query, checked in sso(): not the XML)
                "want_authn_requests_signed": False, "sign_assertion": True,
                "sign_response": False}},
            "key_file": str(self.keys / "idp.key"), "cert_file": str(self.keys / "idp.crt"),
            "xmlsec_binary": "/usr/bin/xmlsec1",
            "metadata": {"inline": self.sps} if self.sps else {},
        }

    def metadata(self) -> str:
        return bytes(create_metadata_string(None, IdPConfig().load(self.config()),
                                            valid=24)).decode()

    def respond(self, login: str, sp_entity: str, acs: str, in_response_to: str | None = None,
                audience: str | None = None, sha1: bool = False) -> str:
        """A response (base64, for the HTTP-POST binding) logging ``login`` in at ``acs``,
        its assertion signed (RSA-SHA256, or ``sha1``); ``audience``: another SP's entity id
        instead of ``sp_entity``."""
        assert self.server is not None
        response = self.server.create_authn_response(
            {k: v for k, v in self.users[login].items()}, in_response_to, acs,
            audience or sp_entity,
            name_id=NameID(format=NAMEID_FORMAT_PERSISTENT, text=f"id-{login}",
                           sp_name_qualifier=sp_entity, name_qualifier=f"{self.base}/metadata"),
            authn={"class_ref": "urn:oasis:names:tc:SAML:2.0:ac:classes:Password"},
            sign_assertion=True, sign_response=False,
            sign_alg=SHA1 if sha1 else RSA_SHA256, digest_alg=DIGEST_SHA1 if sha1 else SHA256)
        return base64.b64encode(str(response).encode()).decode()

    def logout_url(self, sp_entity: str, login: str) -> str:
        """A signed LogoutRequest for ``login``'s sessions at the SP (HTTP-Redirect)."""
        assert self.server is not None
        slo = self.server.metadata.single_logout_service(sp_entity, BINDING_HTTP_REDIRECT,
                                                         "spsso")[0]["location"]
        _id, request = self.server.create_logout_request(
            slo, sp_entity, name_id=NameID(format=NAMEID_FORMAT_PERSISTENT, text=f"id-{login}"),
            sign=False)
        args = self.server.apply_binding(BINDING_HTTP_REDIRECT, str(request), slo, "",
                                         sign=True, sigalg=RSA_SHA256)
        return str(dict(args["headers"])["Location"])

    def form_page(self, acs: str, response: str, relay: str) -> bytes:
        return (f'<!doctype html><form method="post" action="{acs}">'
                f'<input type="hidden" name="SAMLResponse" value="{response}">'
                f'<input type="hidden" name="RelayState" value="{relay}">'
                '<button type="submit">Continue</button></form>'
                "<script>document.forms[0].submit()</script>").encode()

    # -- endpoints -------------------------------------------------------------------------

    def sso(self, q: dict[str, str]) -> Answer:
        assert self.server is not None
        request = self.server.parse_authn_request(q["SAMLRequest"], BINDING_HTTP_REDIRECT)
        issuer = request.message.issuer.text
        certs = self.server.metadata.certs(issuer, "spsso", "signing")
        if "Signature" not in q or not any(verify_redirect_signature(
                q, self.server.sec.sec_backend, cert=c[1]) for c in certs):
            return 400, {}, b"the AuthnRequest is not signed by the SP"
        msg = request.message
        policy = msg.name_id_policy
        self.asked.append(Asked(msg.id, issuer, msg.force_authn == "true",
                                policy.format if policy is not None else "",
                                q.get("RelayState", "")))
        fields = "".join(f'<input type="hidden" name="{k}" value="{v}">'
                         for k, v in (("id", msg.id), ("issuer", issuer),
                                      ("acs", msg.assertion_consumer_service_url or ""),
                                      ("relay", q.get("RelayState", ""))))
        return 200, {"Content-Type": "text/html"}, (
            f'<!doctype html><title>IdP sign in</title><form method="post" action="/sso">'
            f'{fields}<input name="login"><button type="submit">Sign in</button>'
            "</form>").encode()

    def sso_post(self, q: dict[str, str]) -> Answer:
        assert self.server is not None
        if q.get("login") not in self.users:
            return 403, {}, b"unknown user"
        acs = q["acs"] or self.server.metadata.assertion_consumer_service(
            q["issuer"], BINDING_HTTP_POST)[0]["location"]
        response = self.respond(q["login"], q["issuer"], acs, q["id"])
        return 200, {"Content-Type": "text/html"}, self.form_page(acs, response, q["relay"])

    def slo(self, q: dict[str, str]) -> Answer:
        assert self.server is not None
        if "SAMLResponse" in q:  # the SP's answer to a logout this IdP started
            answer = self.server.parse_logout_request_response(q["SAMLResponse"],
                                                               BINDING_HTTP_REDIRECT)
            self.logged_out.append(answer.response.status.status_code.value)
            return 200, {"Content-Type": "text/plain"}, b"IdP: logged out"
        request = self.server.parse_logout_request(q["SAMLRequest"], BINDING_HTTP_REDIRECT)
        sp = request.message.issuer.text
        certs = self.server.metadata.certs(sp, "spsso", "signing")
        if not any(verify_redirect_signature(q, self.server.sec.sec_backend, cert=c[1])
                   for c in certs):
            return 400, {}, b"the LogoutRequest is not signed by the SP"
        response = self.server.create_logout_response(request.message, [BINDING_HTTP_REDIRECT])
        slo = self.server.metadata.single_logout_service(sp, BINDING_HTTP_REDIRECT,
                                                         "spsso")[0]["location"]
        args = self.server.apply_binding(BINDING_HTTP_REDIRECT, str(response), slo,
                                         q.get("RelayState", ""), response=True, sign=True,
                                         sigalg=RSA_SHA256)
        return 302, {"Location": str(dict(args["headers"])["Location"])}, b""


class _Handler(StubHandler):
    idp: Idp  # (set by serving)

    def do_GET(self) -> None:
        idp = self.idp
        path, q = self.query()
        if path == "/metadata":
            self.send(200, {"Content-Type": "application/samlmetadata+xml"},
                      idp.metadata().encode())
        elif path == "/sso":
            self.send(*idp.sso(q))
        elif path == "/slo":
            self.send(*idp.slo(q))
        else:
            self.send(404, {}, b"")

    def do_POST(self) -> None:
        q = self.form()
        if self.query()[0] == "/sso":
            self.send(*self.idp.sso_post(q))
        else:
            self.send(404, {}, b"")


def _keys(where: Path) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Test IdP")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=2))
            .sign(key, hashes.SHA256()))
    (where / "idp.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    (where / "idp.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


@contextmanager
def running(where: Path) -> Iterator[Idp]:
    where.mkdir(parents=True, exist_ok=True)
    _keys(where)
    port = free_port()
    idp = Idp(f"http://127.0.0.1:{port}", where)
    with serving(_Handler, port, idp=idp):
        yield idp
