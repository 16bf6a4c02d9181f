"""Schemathesis over /openapi.json, in process: no 5xx and no accepted invalid input."""

from __future__ import annotations

import asyncio
import atexit
import shutil
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from edgeway import bootstrap
from edgeway.api.app import build
from edgeway.api.platform import Platform
from edgeway.catalog.model import Settings
from edgeway.pki import seal
from edgeway.store.migrate import open_database


def _app(tmp: Path) -> tuple[object, str]:
    async def setup() -> tuple[object, str]:
        db = await open_database(None, tmp)
        token = await bootstrap.first_start(db)
        assert token
        sealer = seal.load(tmp)
        return build(Platform(Settings(public_url="http://testserver"), db, sealer)), token
    return asyncio.run(setup())


_TMP = Path(tempfile.mkdtemp(prefix="edgeway-schemathesis-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
APP, TOKEN = _app(_TMP)
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


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


@schema.parametrize()
@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms(case: schemathesis.Case) -> None:  # type: ignore[type-arg]
    case.call_and_validate(headers={"Authorization": f"Bearer {TOKEN}"},
                           checks=[not_a_server_error, negative_data_rejection,
                                   status_code_conformance, response_schema_conformance,
                                   record_status])


class Workflow(schema.as_state_machine()):  # type: ignore[misc]
    """Stateful runs follow the OpenAPI links: create, then get, update and delete it."""

    def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, object]:  # type: ignore[type-arg]
        return {"headers": {"Authorization": f"Bearer {TOKEN}"}}

    def validate_response(self, response: schemathesis.Response,
                          case: schemathesis.Case, **kwargs: object) -> None:  # type: ignore[type-arg]
        record_status(None, response, case)
        case.validate_response(response, checks=[not_a_server_error,
                                                 response_schema_conformance])


TestWorkflow = Workflow.TestCase
TestWorkflow.settings = settings(max_examples=60, stateful_step_count=6, deadline=None,
                                 derandomize=True,
                                 suppress_health_check=list(HealthCheck))


def test_zz_generated_requests_were_authenticated_and_succeeded() -> None:
    """Guards the tests above against passing vacuously (for example on 403 everywhere)."""
    assert len(SEEN) >= 60
    assert not REFUSED
    ok = {op for op, codes in SEEN.items() if any(200 <= c < 300 for c in codes)}
    lists = {op for op in SEEN if op.startswith("GET /") and "{" not in op}
    assert lists <= ok, sorted(lists - ok)
    creates = {"POST /api_keys", "POST /bot_users", "POST /credentials", "POST /ip_policies"}
    assert creates <= ok, sorted(creates - ok)
    by_id = {op for op in ok if op.endswith("{id}")}
    assert by_id, "the stateful run reached no created resource"
