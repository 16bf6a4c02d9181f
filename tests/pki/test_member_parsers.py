"""The SSH certificate member checks (RFC 3339 times, principals, critical options,
extensions, CA key choices) on arbitrary input: a normalised value or ``Invalid``, never
anything else."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeway.catalog import ssh as ssh_kinds
from edgeway.catalog import ssh_certs
from edgeway.errors import Invalid

CTX: Any = None  # the member checks do not use the context


@pytest.mark.parametrize(("text", "expected"), [
    ("2030-01-01T00:00:00Z", "2030-01-01T00:00:00Z"),
    ("2030-01-01t02:30:00.123456+02:30", "2030-01-01T00:00:00Z"),
    ("2029-12-31 23:00:00-01:00", "2030-01-01T00:00:00Z"),
    ("0001-01-01T00:00:00Z", ""), ("0001-01-01T00:00:00", ""), ("", ""),
])
def test_times(text: str, expected: str) -> None:
    assert ssh_certs._time_member("valid_after")(text, CTX) == expected


def test_one_year_after_handles_leap_days_and_the_end_of_time() -> None:
    leap = datetime(2028, 2, 29, tzinfo=UTC)
    assert ssh_certs._one_year_after(leap) == datetime(2029, 2, 28, tzinfo=UTC)
    assert ssh_certs._one_year_after(ssh_certs.LATEST) == ssh_certs.LATEST


def _only_invalid(check: Any, value: Any) -> Any:
    try:
        return check(value, CTX)
    except Invalid as exc:
        assert exc.status == 400 and exc.member
        return None


TIMES = st.one_of(st.text(max_size=40), st.datetimes().map(lambda t: t.isoformat() + "Z"),
                  st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}"
                                r"([Zz]|[+-][0-9]{2}:[0-9]{2})", fullmatch=True))


@settings(max_examples=500, deadline=None)
@given(TIMES)
def test_time_parser_raises_only_invalid(text: str) -> None:
    out = _only_invalid(ssh_certs._time_member("valid_until"), text)
    if out:
        assert ssh_certs._time_member("valid_until")(out, CTX) == out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=30), max_size=5), st.booleans())
def test_principal_checks_raise_only_invalid(values: list[str], host: bool) -> None:
    _only_invalid(ssh_certs._principals(host), values)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["force-command", "source-address", "x"])
                       | st.text(max_size=10), st.text(max_size=40), max_size=3))
def test_critical_option_and_extension_checks_raise_only_invalid(
        value: dict[str, str]) -> None:
    _only_invalid(ssh_certs._critical_options, value)
    _only_invalid(ssh_certs._extensions, value)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=12), st.text(max_size=12), st.integers(-5, 5000))
def test_ca_key_choice_raises_only_invalid(kind: str, curve: str, size: int) -> None:
    try:
        doc = {"private_key_type": ssh_kinds._key_type_member(kind, CTX),
               "elliptic_curve": ssh_kinds._curve_member(curve, CTX),
               "key_size": ssh_kinds._key_size_member(size, CTX)}
        chosen = ssh_kinds.key_choice(doc)
    except Invalid:
        return
    assert chosen[0] in ("rsa", "ecdsa", "ed25519")
