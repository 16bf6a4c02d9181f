"""Every secret member of the catalog, found by walking the request shapes: written over HTTP
with a value of its own, it never comes back (in the create, get, list, update or module
responses, nor in its edge's) and is never stored in the clear (the raw SQLite file and its
write-ahead log, every PostgreSQL table, every file of the data directory). A new secret
member without an example here fails ``test_every_secret_member_has_an_example``."""

from __future__ import annotations

import asyncio
import copy
import re
import uuid
from typing import Any

import asyncpg
import httpx
import pytest
from msgspec import inspect as mi

from edgeway import catalog
from edgeway.catalog.shapes import shapes
from tests.api.samples import created, uniq
from tests.api.samples_edges import reserved
from tests.pki.material import tls_chain
from tests.server import Server

Path = tuple[str, ...]
SECRET_NAME = re.compile(r"secret|password|passphrase|api_key|private_key(_pem)?$")
# secret by what the kind is, not by its name
BY_KIND: set[tuple[str, Path]] = {("vault_secrets", ("value",))}


def _walk(t: Any, path: Path, out: set[Path]) -> None:
    if isinstance(t, mi.Metadata):
        _walk(t.type, path, out)
    elif isinstance(t, mi.StructType):
        for f in t.fields:
            _walk(f.type, (*path, f.name), out)
    elif isinstance(t, mi.UnionType):
        for x in t.types:
            _walk(x, path, out)
    elif isinstance(t, mi.ListType | mi.DictType):
        _walk(t.item_type if isinstance(t, mi.ListType) else t.value_type, (*path, "*"), out)
    elif isinstance(t, mi.StrType) and path and SECRET_NAME.search(path[-1]):
        out.add(path)


def secret_members() -> set[tuple[str, Path]]:
    out = set(BY_KIND)
    for kind in catalog.ALL:
        if kind.routed and "create" in kind.ops:
            for shape in (shapes(kind).create, shapes(kind).update):
                found: set[Path] = set()
                _walk(mi.type_info(shape), (), found)
                out |= {(kind.collection, p) for p in found}
    return out


def _put(obj: dict[str, Any], path: Path, value: str) -> dict[str, Any]:
    at = obj
    for step in path[:-1]:
        at = at[step]
    at[path[-1]] = value
    return obj


ROLE = {"role": {"role_arn": "arn:aws:iam::123456789012:role/edgeway"}}
CREDS = {"creds": {"access_key_id": "AKIA", "secret_access_key": ""}}
TARGETS: dict[str, dict[str, Any]] = {
    "delivery_stream": {"auth": CREDS, "delivery_stream_arn":
                        "arn:aws:firehose:us-east-1:123456789012:deliverystream/edge"},
    "data_stream": {"auth": CREDS, "stream_arn": "arn:aws:kinesis:eu-west-1:1234567890"
                    "12:stream/edge"},
    "log_group": {"auth": CREDS,
                  "log_group_arn": "arn:aws:logs:us-east-1:123456789012:log-group:edge"},
    "monitoring": {"api_key": ""},
    "cloud_logs_ingestion": {"tenant_id": "t", "client_id": "c", "client_secret": "",
                             "logs_ingestion_uri": "https://dce.example.com",
                             "data_collection_rule_id": "dcr",
                             "data_collection_stream_name": "Custom-Edge_CL"},
}


def _route_module(path: Path, secret: str) -> dict[str, Any]:
    if path[0] == "oauth":
        app = {"client_id": "my-app", "client_secret": secret}
        return {"oauth": {"provider": {path[2]: app}}}
    if path[0] == "oidc":
        return {"oidc": {"issuer": "https://idp.example.com", "client_id": "my-app",
                         "client_secret": secret}}
    return {"webhook_verification": {"provider": "github", "secret": secret}}


class Example:
    """Where a resource holding the secret is made, and the bodies that write it."""

    def __init__(self, api: httpx.Client, collection: str, path: Path) -> None:
        self.api, self.collection, self.path = api, collection, path
        self.url = f"/{collection}"
        self.shown: list[str] = []  # every response text seen
        self.chain = tls_chain("ecdsa")  # (for a TLS certificate)
        self.id = self.edge = ""

    def body(self, secret: str) -> dict[str, Any]:
        c, p = self.collection, self.path
        if c == "vault_secrets":
            return {"value": secret}
        if c == "tls_certificates":
            return {"private_key_pem": secret}
        if c == "event_destinations":
            target = {p[1]: _put(copy.deepcopy(TARGETS[p[1]]), p[2:], secret)}
            return {"target": target}
        assert c == "edges/https/routes", c
        return _route_module(p, secret)

    def create(self, secret: str) -> dict[str, Any]:
        extra: dict[str, Any] = {}
        if self.collection == "vault_secrets":
            vault = created(self.api, "/vaults", {"name": uniq("vault-")})
            extra = {"name": uniq("s-"), "vault_id": vault["id"]}
        elif self.collection == "tls_certificates":
            extra = {"certificate_pem": self.chain.pem}
        elif self.collection == "edges/https/routes":
            edge = created(self.api, "/edges/https", {"hostports": [f"{reserved(self.api)}:443"]})
            self.url = f"/edges/https/{edge['id']}/routes"
            self.edge = edge["id"]
            extra = {"match_type": "path_prefix", "match": "/"}
        r = self.api.post(self.url, json={**extra, **self.body(secret)})
        assert r.status_code == 201, r.text
        self.shown.append(r.text)
        made: dict[str, Any] = r.json()
        self.id = made["id"]
        return made

    def reads(self) -> None:
        urls = [f"{self.url}/{self.id}"]
        if self.collection == "edges/https/routes":
            urls += [f"/edges/https/{self.edge}", "/edges/https?limit=100",
                     f"{self.url}/{self.id}/{self.path[0]}"]
        else:
            urls.append(f"{self.url}?limit=100")
        for url in urls:
            r = self.api.get(url)
            assert r.status_code == 200, (url, r.text)
            self.shown.append(r.text)

    def update(self, secret: str) -> None:
        r = self.api.patch(f"{self.url}/{self.id}", json=self.body(secret))
        assert r.status_code == 200, r.text
        self.shown.append(r.text)
        if self.collection == "edges/https/routes":  # the module's own PUT
            name = self.path[0]
            r = self.api.put(f"{self.url}/{self.id}/{name}", json=self.body(secret)[name])
            assert r.status_code == 200, r.text
            self.shown.append(r.text)


def stored_text(server: Server) -> str:
    """Everything the server has stored, as raw as it is: every file of its data directory
    (the SQLite database and its write-ahead log among them), and every PostgreSQL row."""
    out = [p.read_bytes().decode("latin-1") for p in server.data_dir.rglob("*") if p.is_file()]
    if server.database_url:
        out.append(asyncio.run(_pg_dump(server.database_url)))
    return "\n".join(out)


async def _pg_dump(url: str) -> str:
    conn = await asyncpg.connect(url)
    try:
        tables = [r[0] for r in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")]
        texts = [await conn.fetchval(f'SELECT string_agg(t::text, \'\n\') FROM "{t}" t')
                 for t in tables]
        return "\n".join(t for t in texts if t)
    finally:
        await conn.close()


def test_every_secret_member_has_an_example() -> None:
    known = {"vault_secrets", "tls_certificates", "event_destinations", "edges/https/routes"}
    assert {c for c, _p in secret_members()} == known
    # the walk finds what it must (the route modules' and event targets' secrets)
    assert ("edges/https/routes", ("oidc", "client_secret")) in secret_members()
    assert ("edges/https/routes", ("webhook_verification", "secret")) in secret_members()
    assert ("edges/https/routes", ("oauth", "provider", "social_a", "client_secret")) \
        in secret_members()


@pytest.mark.parametrize("collection, path", [
    pytest.param(c, p, id=f"{c}:{'.'.join(p)}") for c, p in sorted(secret_members())])
def test_a_secret_member_is_never_returned_nor_stored_in_the_clear(
        api: httpx.Client, server: Server, collection: str, path: Path) -> None:
    ex = Example(api, collection, path)
    if collection == "tls_certificates":
        first = second = ex.chain.key
        marks = [line for line in first.splitlines() if "-----" not in line]
    else:
        first, second = f"first-{uuid.uuid4().hex}", f"second-{uuid.uuid4().hex}"
        marks = [first, second]
    ex.create(first)
    ex.reads()
    if collection != "tls_certificates":  # (its key cannot change)
        ex.update(second)
        ex.reads()
    for text in ex.shown:
        assert not [m for m in marks if m in text], text
    stored = stored_text(server)
    assert not [m for m in marks if m in stored], f"{collection} {path} stored in the clear"
