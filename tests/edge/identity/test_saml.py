"""The saml module through a real tunnel, against a pysaml2 IdP on loopback, with a
cookie-keeping client: the SP metadata the edge serves (signed, checked with xmlsec1) at the
URLs the API renders, SP-initiated login (a signed AuthnRequest with ForceAuthn and the
NameID format), authorized_groups, IdP-initiated login allowed and refused by the flag, and
refused assertions: tampered, replayed, for another audience, signed with SHA-1, answering
another browser's login; single logout both ways."""

from __future__ import annotations

import base64
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.edge.identity.browser import Browser, form
from tests.edge.identity.conftest import Identity
from tests.edge.identity.saml_idp import Idp
from tests.edge.identity.test_oauth import identity
from tests.edge.test_edges import made, route


@dataclass
class Sp:
    site: str
    route: dict[str, Any]

    @property
    def entity(self) -> str:
        return str(self.route["saml"]["entity_id"])

    @property
    def acs(self) -> str:
        return str(self.route["saml"]["assertion_consumer_service_url"])


def saml_site(ids: Identity, idp: Idp, host: str, *more_hosts: str, **module: Any) -> Sp:
    with ids.srv.client() as api:
        for name in (host, *more_hosts):
            made(api, "/reserved_domains", {"domain": name})
        edge = made(api, "/edges/https", {"hostports": [f"{h}:443" for h in (host,
                                                                             *more_hosts)]})
        rt = route(api, edge["id"], "path_prefix", "/", ids.backend,
                   saml={"idp_metadata": idp.metadata(), **module})
    sp = Sp(ids.site(host), rt)
    with Browser(ids.srv) as web:
        metadata = web.go(sp.entity)
    assert metadata.status_code == 200, metadata.text
    idp.load(metadata.text)
    return sp


@pytest.fixture(scope="module")
def sites(ids: Identity, idp: Idp) -> tuple[Sp, Sp]:
    """One route that allows IdP-initiated logins and admins only, one that does neither."""
    return (saml_site(ids, idp, "sso.example.com", allow_idp_initiated=True,
                      authorized_groups=["admins"], force_authn=True),
            saml_site(ids, idp, "strict.example.com"))


def test_the_sp_metadata_is_signed_where_the_api_says(ids: Identity, sites: tuple[Sp, Sp],
                                                       tmp_path: Path) -> None:
    sp = sites[0]
    saml = sp.route["saml"]
    assert sp.entity == f"{sp.site}/.edgeway/saml/{sp.route['id']}" == saml["metadata_url"]
    with Browser(ids.srv) as web:
        xml = web.go(sp.entity).text
    assert f'entityID="{sp.entity}"' in xml
    assert f'Location="{saml["assertion_consumer_service_url"]}"' in xml
    assert f'Location="{saml["single_logout_url"]}"' in xml
    (tmp_path / "md.xml").write_text(xml)
    (tmp_path / "sp.crt").write_text(saml["request_signing_certificate_pem"])
    check = subprocess.run(["xmlsec1", "--verify", "--pubkey-cert-pem", str(tmp_path / "sp.crt"),
                            "--id-attr:ID", "urn:oasis:names:tc:SAML:2.0:metadata:"
                            "EntityDescriptor", str(tmp_path / "md.xml")],
                           capture_output=True, text=True)
    assert check.returncode == 0 and "OK" in check.stderr, check.stderr


def test_sp_initiated_login_and_authorized_groups(ids: Identity, idp: Idp,
                                                  sites: tuple[Sp, Sp]) -> None:
    sp = sites[0]
    with Browser(ids.srv) as web:
        form = web.go(f"{sp.site}/headers?x=1")
        assert "IdP sign in" in form.text, form.text
        asked = idp.asked[-1]
        assert asked.issuer == sp.entity and asked.force_authn
        assert asked.nameid_format.endswith(":persistent") and len(asked.relay) <= 80
        posting = web.submit(form, login="alice")  # the IdP's auto-posting form
        r = web.submit(posting)
        assert (r.url.path, r.url.query) == ("/headers", b"x=1")
        assert identity(r) == {"edgeway-auth-user-id": "id-alice",
                               "edgeway-auth-user-email": "alice@corp.example",
                               "edgeway-auth-user-name": "Alice"}
    with Browser(ids.srv) as web:
        r = web.submit(web.submit(web.go(f"{sp.site}/headers"), login="bob"))
        assert r.status_code == 403 and "not a member of any of authorized_groups" in r.text


def post(web: Browser, sp: Sp, response: str, relay: str = "") -> httpx.Response:
    return web.go(sp.acs, "POST", data={"SAMLResponse": response, "RelayState": relay},
                  cross_site=True)


def test_refused_assertions(ids: Identity, idp: Idp, sites: tuple[Sp, Sp]) -> None:
    sp, strict = sites
    good = idp.respond("alice", sp.entity, sp.acs)  # IdP-initiated: answers no request
    with Browser(ids.srv) as web:
        r = post(web, sp, good, f"{sp.site}/headers?from=idp")
        assert (r.url.path, r.url.query) == ("/headers", b"from=idp")
        assert identity(r)["edgeway-auth-user-id"] == "id-alice"
    refusals = {}
    xml = base64.b64decode(idp.respond("alice", sp.entity, sp.acs)).decode()
    tampered = base64.b64encode(xml.replace("alice@corp.example", "mallory@corp.example")
                                .encode()).decode()
    for name, response, where in (
        ("replayed", good, sp),
        ("tampered", tampered, sp),
        ("audience", idp.respond("alice", sp.entity, sp.acs, audience=strict.entity), sp),
        ("sha1", idp.respond("alice", sp.entity, sp.acs, sha1=True), sp),
        ("idp-initiated", idp.respond("alice", strict.entity, strict.acs), strict),
        ("not base64", "%%%", sp),
    ):
        with Browser(ids.srv) as web:
            r = post(web, where, response, "/headers")
            refusals[name] = (r.status_code, r.text)
            where_host = where.site.split("//")[1].split(":")[0]
            assert web.cookie(where_host, "__Host-edgeway.session") is None
    assert all(status in (400, 403) for status, _ in refusals.values()), refusals
    assert "used before" in refusals["replayed"][1]
    assert "Signature validation failed" in refusals["tampered"][1] or \
        "signature" in refusals["tampered"][1].lower()
    assert "audience" in refusals["audience"][1].lower()
    assert "Deprecated signature algorithm" in refusals["sha1"][1]
    assert "allow_idp_initiated" in refusals["idp-initiated"][1]


def test_a_response_for_another_browsers_login_is_refused(ids: Identity, idp: Idp,
                                                         sites: tuple[Sp, Sp]) -> None:
    strict = sites[1]
    with Browser(ids.srv) as web, Browser(ids.srv) as other:
        posting = web.submit(web.go(f"{strict.site}/headers"), login="bob")
        fields = form(posting)[2]  # the IdP's form, with the response to web's request
        r = post(other, strict, fields["SAMLResponse"], fields["RelayState"])
        assert r.status_code == 400 and "login started in this browser" in r.text
        assert identity(web.submit(posting))["edgeway-auth-user-id"] == "id-bob"


def test_single_logout(ids: Identity, idp: Idp, sites: tuple[Sp, Sp]) -> None:
    strict = sites[1]
    with Browser(ids.srv) as one, Browser(ids.srv) as two:
        for web in (one, two):
            assert identity(web.submit(web.submit(web.go(f"{strict.site}/headers"),
                                                  login="bob")))["edgeway-auth-user-id"] == "id-bob"
        done = one.go(idp.logout_url(strict.entity, "bob"))  # the IdP ends bob's sessions
        assert done.text == "IdP: logged out" and idp.logged_out[-1].endswith(":Success")
        for web in (one, two):
            assert web.request("GET", f"{strict.site}/headers").status_code == 302
    with Browser(ids.srv) as web:  # the SP's own logout, passed on to the IdP
        web.submit(web.submit(web.go(f"{strict.site}/headers"), login="bob"))
        r = web.go(f"{strict.site}/.edgeway/saml/logout")
        assert r.status_code == 200 and r.text == "Signed out.\n", r.text
        assert web.request("GET", f"{strict.site}/headers").status_code == 302


def test_the_nameid_format_and_the_route_host(ids: Identity, idp: Idp) -> None:
    """A route that asks for e-mail NameIDs refuses persistent ones; its service provider
    lives on the edge's first host, where a login on its other host goes first."""
    sp = saml_site(ids, idp, "first.example.com", "second.example.com",
                   allow_idp_initiated=True,
                   nameid_format="urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress")
    assert sp.entity.startswith(f"{ids.site('first.example.com')}/.edgeway/saml/")
    with Browser(ids.srv) as web:
        r = web.request("GET", f"{ids.site('second.example.com')}/headers?y=2")
        assert r.status_code == 302
        assert r.headers["location"] == f"{ids.site('first.example.com')}/headers?y=2"
        page = web.go(r.headers["location"])
        assert "IdP sign in" in page.text and idp.asked[-1].nameid_format.endswith(
            ":emailAddress")
        r = post(web, sp, idp.respond("alice", sp.entity, sp.acs), "/headers")
        assert r.status_code == 403 and "NameID format" in r.text


def test_an_idp_initiated_relay_state_stays_on_the_site_and_in_its_header(
        ids: Identity, idp: Idp, sites: tuple[Sp, Sp]) -> None:
    """An IdP-initiated login's RelayState (unsigned: whoever posts the form chooses it) that
    would split the redirect's head, leave the site once a browser drops its tab, or cannot
    be said in a header sends the browser to the site's root instead."""
    sp = sites[0]
    host = sp.site.split("//")[1].split(":")[0]
    for relay in ("/a\r\nSet-Cookie: planted=1", "/\t/evil.example/x", "/caf\u00e9\u20ac",
                  "https://evil.example/x", f"{sp.site}/\t/evil.example/x"):
        with Browser(ids.srv) as web:
            r = web.request("POST", sp.acs, cross_site=True, data={
                "SAMLResponse": idp.respond("alice", sp.entity, sp.acs), "RelayState": relay})
            assert (r.status_code, r.headers["location"]) == (302, "/"), (relay, r.headers)
            assert web.cookie(host, "planted") is None and "planted" not in r.headers
            assert web.cookie(host, "__Host-edgeway.session") is not None  # (logged in)


def test_a_module_added_again_signs_with_its_new_key(ids: Identity, idp: Idp,
                                                     tmp_path: Path) -> None:
    """Removing the saml module and adding it again gives the route a new signing key: the
    metadata the edge serves is signed with it at once (the edge kept using the old one,
    which an IdP loaded with the new certificate refuses)."""
    sp = saml_site(ids, idp, "rekey.example.com")
    module = f"/edges/https/{sp.route['edge_id']}/routes/{sp.route['id']}/saml"
    with ids.srv.client() as api:
        before = api.get(module).json()
        assert api.delete(module).status_code == 204
        r = api.put(module, json={"idp_metadata": idp.metadata()})
        assert r.status_code == 200, r.text
        cert = r.json()["request_signing_certificate_pem"]
    assert cert != before["request_signing_certificate_pem"]
    (tmp_path / "sp.crt").write_text(cert)
    with Browser(ids.srv) as web:
        (tmp_path / "md.xml").write_text(web.go(sp.entity).text)
    check = subprocess.run(["xmlsec1", "--verify", "--pubkey-cert-pem", str(tmp_path / "sp.crt"),
                            "--id-attr:ID", "urn:oasis:names:tc:SAML:2.0:metadata:"
                            "EntityDescriptor", str(tmp_path / "md.xml")],
                           capture_output=True, text=True)
    assert check.returncode == 0 and "OK" in check.stderr, check.stderr
