"""The site-to-site page over real HTTP (``test_site_flow`` in tests/domains does it in
Chromium with Pebble): each step's operation as the signed-in key, the API's message next to
the input, the ACL's verdicts rule by rule, the config file the agent loads as written, the
CA file; a read-only key offered no step and its forged ones refused; forms without their
CSRF token refused; a step whose resource is gone dropped from the flow."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from edgeway.agent import config as agent_config
from edgeway.dashboard import agentfile
from tests.dashboard.visitor import csrf_of, post, signed_in
from tests.server import Server

SITE = "/dashboard/site"


def _state(r: httpx.Response) -> dict[str, str]:
    """The flow's state from the redirect a step answered with."""
    assert r.status_code == 303, r.text
    query = r.headers["location"].split("?", 1)[1].split("#")[0]
    return dict(pair.split("=", 1) for pair in query.split("&"))


def _error(page: httpx.Response, name: str) -> str:
    found = re.search(rf'<p class="error" id="err-{name}">(.*?)</p>', page.text, re.S)
    return found.group(1) if found else ""


def test_each_step_is_the_apis_operation(server: Server, tmp_path: Path) -> None:
    tag = secrets.token_hex(3)
    ingress, wildcard = f"connect-{tag}.s2s.example", f"*.site-{tag}.s2s.example"
    with signed_in(server) as browser:
        first = browser.get(SITE)
        assert first.status_code == 200 and 'id="create-ingress"' in first.text
        assert 'id="create-authtoken"' not in first.text  # (no bot user nor ingress yet)
        state = _state(post(browser, SITE, f"{SITE}/ingress", {"ingress_domain": ingress}))
        # a name taken: the API's message next to the input, nothing else made
        again = post(browser, SITE, f"{SITE}/ingress", {"ingress_domain": ingress})
        assert again.status_code == 400 and "ERR_EDGEWAY_413" in _error(again, "ingress_domain")
        assert f'value="{ingress}"' in again.text
        state = _state(post(browser, SITE, f"{SITE}/domain", {"wildcard": wildcard, **state}))
        page = browser.get(SITE, params=state)
        with server.client() as api:
            targets = api.get(f"/agent_ingresses/{state['ingress']}").json()["ns_targets"]
        assert re.findall(r'<code id="ns-\d">([^<]+)', page.text) == targets
        assert re.search(r'<code id="cname-1">[a-z0-9]+\.cname\.', page.text)
        assert re.search(r'<code id="cname-2">[a-z0-9]+\.acme\.', page.text)
        state = _state(post(browser, SITE, f"{SITE}/bot", {"bot_name": f"bot {tag}", **state}))
        page = browser.get(SITE, params=state)
        assert f"bind:{wildcard}</textarea>" in page.text  # (the ACL offered)
        # the ACL's verdicts, rule by rule
        verdicts = post(browser, SITE, f"{SITE}/acl", {"acl": f"bind:{wildcard}\n\nbind:no pe"})
        assert verdicts.text.count("rule-ok") == 1 and verdicts.text.count("rule-bad") == 1
        refused = post(browser, SITE, f"{SITE}/authtoken", {"acl": "bind:no pe", **state})
        assert refused.status_code == 400 and "ERR_EDGEWAY_600" in _error(refused, "acl")
        made = post(browser, SITE, f"{SITE}/authtoken", {"acl": f"bind:{wildcard}", **state})
        assert made.status_code == 201, made.text
        token = re.search(r'name="token" value="([^"]+)"', made.text)
        password = re.search(r'name="password" value="([^"]+)"', made.text)
        assert token and password
        download = browser.post(f"{SITE}/config", data={
            "csrf": csrf_of(made), "token": token.group(1), "password": password.group(1),
            **state})
        assert download.status_code == 200
        assert download.headers["content-disposition"] == 'attachment; filename="edgeway.yml"'
        assert download.headers["cache-control"] == "no-store"
        ca = browser.get(f"{SITE}/ca.pem", params={"ingress": state["ingress"]})
        # a config file made without the form of the authtoken's answer is refused
        bare = browser.post(f"{SITE}/config", data={"csrf": csrf_of(made), **state})
        assert bare.status_code == 400 and "create the authtoken again" in bare.text
    # the file is the one the agent loads: as written, with the CA file beside it
    (tmp_path / "edgeway.yml").write_text(download.text)
    (tmp_path / "ca.pem").write_text(ca.text)
    loaded = agent_config.load([str(tmp_path / "edgeway.yml")])
    assert loaded.authtoken == token.group(1)
    assert loaded.server_addr == f"tunnel.us.{ingress}:{server.tunnel_port}"
    assert loaded.root_cas == str(tmp_path / "ca.pem")
    tunnel = loaded.tunnels["agent-api"]
    assert tunnel.basic_auth == (("agent", password.group(1)),)
    assert f"agent-api.site-{tag}.s2s.example" in download.text
    platform_ca = (server.data_dir / "ca.pem").read_text()
    assert [c.subject for c in x509.load_pem_x509_certificates(ca.text.encode())] == \
        [c.subject for c in x509.load_pem_x509_certificates(platform_ca.encode())]
    with server.client() as api:  # (what the steps made, as the API shows it)
        cred = next(c for c in api.get("/credentials").json()["credentials"]
                    if c["id"] in made.text)
        assert cred["acl"] == [f"bind:{wildcard}"]
        assert cred["owner_id"] == state["bot"]


def test_a_read_only_key_gets_no_step_and_a_forged_one_is_refused(server: Server) -> None:
    with server.client() as api:
        ro = api.post("/api_keys", json={"role": "read_only"}).json()
        before = len(api.get("/agent_ingresses").json()["ingresses"])
    with signed_in(server, ro["token"]) as browser:
        page = browser.get(SITE)
        assert page.status_code == 200 and "Site to site" in page.text
        for button in ("create-ingress", "create-domain", "create-bot", "create-authtoken"):
            assert f'id="{button}"' not in page.text
        r = post(browser, SITE, f"{SITE}/ingress", {"ingress_domain": "ro.s2s.example"})
        assert r.status_code == 403 and "ERR_EDGEWAY_260" in r.text
    with server.client() as api:
        assert len(api.get("/agent_ingresses").json()["ingresses"]) == before
        assert api.delete(f"/api_keys/{ro['id']}").status_code == 204


def test_steps_without_their_csrf_token_or_their_choices_are_refused(server: Server) -> None:
    with signed_in(server) as browser:
        browser.get(SITE)
        r = browser.post(f"{SITE}/ingress", data={"ingress_domain": "x.s2s.example"})
        assert r.status_code == 403 and "CSRF" in r.text
        r = post(browser, SITE, f"{SITE}/authtoken", {"acl": "*"})
        assert r.status_code == 400 and "choose them first" in r.text


def test_a_step_whose_resource_is_gone_leaves_the_flow(server: Server) -> None:
    tag = secrets.token_hex(3)
    with signed_in(server) as browser:
        state = _state(post(browser, SITE, f"{SITE}/bot", {"bot_name": f"gone {tag}"}))
        with server.client() as api:
            assert api.delete(f"/bot_users/{state['bot']}").status_code == 204
        page = browser.get(SITE, params=state)
        assert page.status_code == 200 and 'id="create-bot"' in page.text


@pytest.mark.parametrize(("wildcard", "api"), [("*.site1.example.com",
                                                 "agent-api.site1.example.com"),
                                                ("plain.example.com", "")])
def test_the_agent_api_domain_is_under_the_wildcard(wildcard: str, api: str) -> None:
    assert agentfile.api_domain(wildcard) == api


def test_the_server_addr_is_the_nodes_region_domain() -> None:
    domains = ["tunnel.us.c.example", "tunnel.eu.c.example"]
    assert agentfile.server_addr(domains, "eu", 4443) == "tunnel.eu.c.example:4443"
    assert agentfile.server_addr(domains, "jp", 443) == "tunnel.us.c.example:443"
    assert agentfile.server_addr([], "us", 443) == ""


def test_the_ca_file_holds_each_ca_once_and_no_leaf() -> None:
    from tests.domains.tlsprobe import UploadCA

    platform, issuer = UploadCA(), UploadCA()
    chain, _key = issuer.leaf("tunnel.us.c.example")  # (the leaf, then its CA)
    leaf_only = chain[:chain.index("-----END CERTIFICATE-----")] + "-----END CERTIFICATE-----\n"
    bundle = agentfile.ca_bundle(platform.pem, [chain, chain, leaf_only])
    assert [c.fingerprint(hashes.SHA256()) for c in
            x509.load_pem_x509_certificates(bundle.encode())] == \
        [platform.cert.fingerprint(hashes.SHA256()), issuer.cert.fingerprint(hashes.SHA256())]
