"""Schemathesis over /openapi.json, in process: no 5xx and no accepted invalid input.

Each operation is a test of its own, built when it runs, not when the suite is collected:
schemathesis computes an operation's coverage cases and examples as it builds its test, and
every pytest-xdist worker collects every test (about ten seconds of CPU each, for the one
worker that runs them)."""

from __future__ import annotations

import asyncio
import atexit
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from edgeway import bootstrap, catalog
from edgeway.api.app import build
from edgeway.pki import seal
from edgeway.platform import Platform
from edgeway.settings import Settings
from edgeway.store.db import Database
from edgeway.store.migrate import open_database


def _app(tmp: Path) -> tuple[object, str, Database]:
    async def setup() -> tuple[object, str, Database]:
        db = await open_database(None, tmp)
        token = await bootstrap.first_start(db)
        assert token
        sealer = seal.load(tmp)
        return build(Platform(Settings(public_url="http://testserver"), db, sealer)), token, db
    return asyncio.run(setup())


_TMP = Path(tempfile.mkdtemp(prefix="edgeway-schemathesis-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
APP, TOKEN, DB = _app(_TMP)
KEY_ID = f"ak_{TOKEN.split('_')[0]}"


async def _reset() -> None:
    """Every resource gone but the admin user and its key: each stateful run starts from the
    same state (its steps depend on what earlier answers held)."""
    async with DB.write() as tx:
        for kind in catalog.ALL:
            if kind.collection == "users":
                continue
            keep = KEY_ID if kind.collection == "api_keys" else ""
            await tx.execute(f"DELETE FROM {kind.table} WHERE id <> ?", keep)
        await tx.execute("DELETE FROM links WHERE src_id <> ?", KEY_ID)
        await tx.execute("DELETE FROM claims")
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
OPERATIONS = [(method, path) for path, item in schema.raw_schema["paths"].items()
              for method in item if method in _METHODS]


@pytest.fixture(params=OPERATIONS, ids=[f"{m.upper()} {p}" for m, p in OPERATIONS])
def operation(request: pytest.FixtureRequest) -> schemathesis.BaseSchema:
    """The document narrowed to one operation (the rest of it, components and links, kept)."""
    method, path = request.param
    item = schema.raw_schema["paths"][path]
    narrowed = {**schema.raw_schema, "paths": {path: {
        key: value for key, value in item.items() if key == method or key not in _METHODS}}}
    one = schemathesis.openapi.from_dict(narrowed)
    one.app = APP
    one.location = "/openapi.json"
    # (schemathesis's runner reads and restores the item's ``_nodeid``, which pytest 9's items
    # no longer have: the id it would restore is the item's own)
    request.node._nodeid = request.node.nodeid
    return one


SEEN: dict[str, set[int]] = {}
REFUSED: list[str] = []


@schemathesis.check
def record_status(ctx: object, response: schemathesis.Response,
                  case: schemathesis.Case) -> bool:  # type: ignore[type-arg]
    """Not a rule: remembers statuses so the test below can prove requests got through."""
    sent = response.request.headers.get("Authorization")
    code = response.status_code
    SEEN.setdefault(case.operation.label, set()).add(code)
    if sent == f"Bearer {TOKEN}" and code == 403:
        REFUSED.append(case.operation.label)
    return True


RULES: list[dict[str, Any]] = schema.raw_schema["x-edgeway-rules"]
_MEMBER = re.compile(r"^Invalid value for '([^']*)'")
STATED: list[tuple[str, str]] = []  # (operation, code) of refusals a stated rule explains


@schemathesis.check
def refused_only_by_stated_rules(ctx: object, response: schemathesis.Response,
                                 case: schemathesis.Case) -> bool | None:  # type: ignore[type-arg]
    """A schema-valid request may be refused (400) only by a rule the document states in
    ``x-edgeway-rules``: everything else the API checks is in the schema."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    body = response.json()
    code, msg = body.get("error_code", ""), body.get("msg", "")
    found = _MEMBER.match(msg)
    member = found.group(1) if found else ""
    for rule in RULES:
        if rule["code"] == code and rule.get("says", "") in msg \
                and any(_glob(p).fullmatch(member) for p in rule["members"]):
            STATED.append((case.operation.label, code))
            return True
    raise AssertionError(f"a schema-valid request was refused by a rule the OpenAPI document "
                         f"does not state ({case.operation.label}: {code}, member '{member}'): "
                         f"{msg} (body: {case.body!r:.300})")


def _glob(pattern: str) -> re.Pattern[str]:
    """A member pattern of x-edgeway-rules: ``*`` stands for anything, the rest is literal."""
    return re.compile(re.escape(pattern).replace(r"\*", ".*"))


# (each operation: its coverage cases and the document's examples, then 12 generated requests,
# positive and negative, the same ones every run)
@schemathesis.pytest.from_fixture("operation").parametrize()
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"},
                           checks=[not_a_server_error, negative_data_rejection,
                                   status_code_conformance, response_schema_conformance,
                                   refused_only_by_stated_rules, record_status])


CREATES = {"POST /api_keys", "POST /bot_users", "POST /credentials", "POST /ip_policies"}


@pytest.fixture(autouse=True)
def _got_through(request: pytest.FixtureRequest) -> Iterator[None]:
    """Guards each operation's run against passing vacuously (for example on 403
    everywhere): its requests were answered, none refused for want of a right the admin has,
    and a collection's list and the creates above succeeded at least once. (Each run checks
    its own: the parallel run cuts this file into units, ``tests/schedule.py``.)"""
    yield
    if "operation" not in request.fixturenames:
        return
    method, path = request.node.callspec.params["operation"]
    label = f"{method.upper()} {path}"
    assert SEEN.get(label), f"no request of {label} was answered"
    assert label not in REFUSED, f"the admin's key was refused by {label}"
    if (method == "get" and "{" not in path) or label in CREATES:
        assert any(200 <= code < 300 for code in SEEN[label]), (label, SEEN[label])


class Workflow(schema.as_state_machine()):  # type: ignore[misc]
    """Stateful runs follow the OpenAPI links: create, then get, update and delete it."""

    def setup(self) -> None:
        asyncio.run(_reset())

    def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, object]:  # type: ignore[type-arg]
        return {"headers": {"Authorization": f"Bearer {TOKEN}"}}

    def validate_response(self, response: schemathesis.Response,
                          case: schemathesis.Case, **kwargs: object) -> None:  # type: ignore[type-arg]
        record_status(None, response, case)
        STATEFUL.setdefault(case.operation.label, set()).add(response.status_code)
        case.validate_response(response, checks=[not_a_server_error,
                                                 response_schema_conformance])


STATEFUL: dict[str, set[int]] = {}


def test_stateful_runs_follow_links_to_the_resources_they_created() -> None:
    run_state_machine_as_test(Workflow, settings=settings(
        max_examples=60, stateful_step_count=6, deadline=None, derandomize=True,
        suppress_health_check=list(HealthCheck)))
    by_id = {op for op, codes in STATEFUL.items()
             if op.endswith("{id}") and any(200 <= c < 300 for c in codes)}
    assert by_id, "the stateful run reached no created resource"
    assert not REFUSED
