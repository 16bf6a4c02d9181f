"""One server per backend for the login tests, started with its OAuth endpoints pointed at the
local providers and a managed code_host_a application; one SDK agent per server serving a
labeled tunnel the routes' tunnel group backend selects (logins are tested through a real
tunnel)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, backend_server
from tests.edge import upstream
from tests.edge.agents import agent
from tests.edge.identity import providers, saml_idp
from tests.edge.identity.providers import Provider, User
from tests.edge.identity.saml_idp import Idp
from tests.edge.test_edges import made
from tests.server import Server

MANAGED = ("managed-client", "managed-secret")


@dataclass
class Identity:
    srv: Server
    code_host: Provider
    search: Provider
    backend: str  # the tunnel group backend of the SDK agent's labeled tunnel
    login_site: str  # the managed applications' callback site

    def site(self, host: str) -> str:
        return f"https://{host}:{self.srv.https_port}"


@pytest.fixture(scope="package")
def code_host() -> Iterator[Provider]:
    with providers.running("code_host_a") as p:
        p.page_size = 2  # (teams come in pages: the edge follows Link: next)
        for user in (
            User("alice", 1, "Alice", "alice@acme.example",
                 teams=[("other", "x", 13), ("acme", "web", 12), ("acme", "ops", 11)]),
            User("bob", 2, "Bob", "bob@acme.example", orgs=["acme"]),
            User("carol", 3, "Carol", "carol@elsewhere.example"),
            User("dave", 4, "Dave", "dave@acme.example", verified=False),
            User("erin", 5, "Erin", "erin@acme.example", teams=[("acme", "ops", 11)]),
        ):
            p.add(user)
        yield p


@pytest.fixture(scope="package")
def search() -> Iterator[Provider]:
    with providers.running("search_a") as p:
        for user in (User("gina", 101, "Gina", "gina@search.example"),
                     User("hank", 102, "Hank", "hank@search.example", verified=False)):
            p.add(user)
        yield p


@pytest.fixture(scope="package")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Idp]:
    with saml_idp.running(Path(tmp_path_factory.mktemp("idp"))) as server:
        server.users = {
            "alice": {"mail": ["alice@corp.example"], "displayName": ["Alice"],
                      "groups": ["admins", "staff"]},
            "bob": {"mail": ["bob@corp.example"], "displayName": ["Bob"], "groups": ["staff"]},
        }
        yield server


@pytest.fixture(scope="package")
def service() -> Iterator[int]:
    with upstream.running("svc") as port:
        yield port


@pytest.fixture(scope="package", params=BACKENDS)
def ids(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
        code_host: Provider, search: Provider, service: int) -> Iterator[Identity]:
    data = Path(tmp_path_factory.mktemp(f"identity-{request.param}"))
    apps = data / "oauth-apps.json"
    apps.write_text(json.dumps({"github": dict(zip(("client_id", "client_secret"), MANAGED,
                                                   strict=True))}))
    extra = ["--oauth-apps", str(apps)]
    for endpoint in code_host.endpoints() + search.endpoints():
        extra += ["--oauth-endpoint", endpoint]
    with backend_server(request.param, data, *extra) as srv:
        login_site = f"https://login.edgeway.localhost:{srv.https_port}"
        code_host.client(*MANAGED, f"{login_site}/.edgeway/oauth/callback")
        with srv.client() as api:
            token = api.post("/credentials", json={}).json()["token"]
            group = made(api, "/backends/tunnel_group", {"labels": {"svc": "identity"}})
        a = agent(srv, token, {"kind": "labeled", "labels": {"svc": "identity"},
                               "forward": f"http://127.0.0.1:{service}"})
        try:
            yield Identity(srv, code_host, search, group["id"], login_site)
        finally:
            a.stop()
