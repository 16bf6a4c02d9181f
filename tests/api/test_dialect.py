"""The vendor dialect's one table, without a server: every renamed member both ways, Edgeway's
own names refused in the vendor's dialect, member paths and error bodies in its words."""

from __future__ import annotations

from typing import Any

import pytest

from edgeway.api import dialect


def test_every_rename_round_trips() -> None:
    native = {"oauth": {"provider": {n: {"client_id": "x"} for p, n, _v in dialect.RENAMES
                                     if p == "provider"}},
              "target": {"monitoring": {"tags": "a", "site": "b", "api_key": "k"},
                         "delivery_stream": {"auth": {"creds": {"access_key_id": "i",
                                                                "secret_access_key": "s"}}}},
              "tags": "not renamed here"}
    vendor = dialect.outbound(native, dialect.VENDOR)
    assert set(vendor["oauth"]["provider"]) == {"github", "facebook", "microsoft", "google",
                                                "linkedin", "gitlab", "twitch", "amazon"}
    assert vendor["target"]["datadog"] == {"ddtags": "a", "ddsite": "b", "api_key": "k"}
    assert vendor["target"]["firehose"]["auth"]["creds"] == {"aws_access_key_id": "i",
                                                             "aws_secret_access_key": "s"}
    assert vendor["tags"] == "not renamed here"
    assert dialect.inbound(vendor) == native
    assert dialect.outbound(native, dialect.NATIVE) is native


@pytest.mark.parametrize("body, member", [
    ({"provider": {"code_host_a": {}}}, "provider.code_host_a"),
    ({"target": {"datadog": {"tags": "x"}}}, "target.datadog.tags"),
    ({"target": {"firehose": {"auth": {"creds": {"access_key_id": "x"}}}}},
     "target.firehose.auth.creds.access_key_id"),
])
def test_edgeway_names_are_unknown_in_the_vendor_dialect(body: object, member: str) -> None:
    with pytest.raises(dialect.Unknown) as caught:
        dialect.inbound(body)
    assert str(caught.value) == member


def test_error_bodies_in_the_vendor_words() -> None:
    body = {"error_code": "ERR_EDGEWAY_236", "status_code": 400,
            "msg": "Invalid value for 'target.monitoring.api_key': must not be empty; one of "
                   "delivery_stream, log_group_arn, code_host_a",
            "details": {"member": "target.monitoring.api_key", "operation_id": "op_1"}}
    out = dialect.error_body(body, "target.monitoring.api_key", dialect.VENDOR)
    assert out["error_code"] == "ERR_NGROK_236"
    assert out["details"]["member"] == "target.datadog.api_key"
    assert out["msg"] == ("Invalid value for 'target.datadog.api_key': must not be empty; "
                          "one of firehose, log_group_arn, github")
    assert dialect.member_path("sources[0].type", dialect.VENDOR) == "sources[0].type"


def test_any_depth_is_walked_without_recursion() -> None:
    deep: list[Any] = []
    body = {"target": {"monitoring": {"tags": deep}}}
    for _ in range(100_000):
        deep.append([])
        deep = deep[0]
    vendor = dialect.outbound(body, dialect.VENDOR)
    assert list(vendor["target"]["datadog"]) == ["ddtags"]
    assert list(dialect.inbound(vendor)["target"]["monitoring"]) == ["tags"]
