"""Vault secrets put into policies at compile time (``edge/modules/secrets.py``)."""

from __future__ import annotations

import cel
import pytest

from edgeway.edge.modules import secrets

VALUES = {("keys", "token"): 'a "quoted" \\ value', ("keys", "other"): "x"}


def test_calls_become_literals_and_text_stays_text() -> None:
    expr = ("req == secrets.get('keys', \"token\") && "
            "'secrets.get(\"keys\", \"other\")' != secrets.get('keys','other')")
    done = secrets.in_expression(expr, VALUES)
    assert done.count("secrets.get") == 1  # the one inside a string literal
    assert cel.compile(done).execute({"req": VALUES[("keys", "token")]}) is True
    assert secrets.in_config({"h": ["Bearer ${secrets.get('keys', 'other')}", 3]}, VALUES) \
        == {"h": ['Bearer ${"x"}', 3]}


@pytest.mark.parametrize("expr, why", [
    ("secrets.get('keys', 'nope') == ''", "'nope' of the vault 'keys' does not exist"),
    ("secrets.get(req.host, 'token') == ''", "as string literals"),
])
def test_what_cannot_be_resolved_is_refused(expr: str, why: str) -> None:
    with pytest.raises(secrets.Missing, match=why):
        secrets.in_expression(expr, VALUES)
