"""The dashboard's pure parts: every listed kind has a page, the sign-in limiter, forms to
bodies, and the in-process call carrying its caller."""

from __future__ import annotations

from edgeway import catalog
from edgeway.dashboard import forms
from edgeway.dashboard.limiter import WINDOW, Limiter
from edgeway.dashboard.nav import BY_SLUG


def test_every_kind_the_api_lists_has_a_page() -> None:
    listed = {k.collection for k in catalog.ALL if k.routed and k.path is None
              and "list" in k.ops}
    assert {e.kind.collection for e in BY_SLUG.values()} == listed
    assert not {"signin", "signout", "sessions", "static"} & set(BY_SLUG)


def test_failed_sign_ins_are_limited_per_address() -> None:
    limiter = Limiter(2)
    for _ in range(2):
        assert limiter.wait("192.0.2.1", 100.0) == 0
        limiter.failed("192.0.2.1", 100.0)
    assert limiter.wait("192.0.2.1", 110.0) == WINDOW - 10
    assert limiter.wait("192.0.2.2", 110.0) == 0
    assert limiter.wait("192.0.2.1", 100.0 + WINDOW) == 0  # (a minute on)
    for _ in range(2):  # one IPv6 /64 is one client
        limiter.failed(f"2001:db8::{_ + 1}", 100.0)
    assert limiter.wait("2001:db8::ffff", 101.0) > 0
    assert limiter.wait("2001:db8:0:1::1", 101.0) == 0


def test_a_form_becomes_the_body_the_api_takes() -> None:
    widgets = forms.create_widgets(catalog.BY_COLLECTION["credentials"])
    kinds = {w.name: w.kind for w in widgets}
    assert kinds["acl"] == "lines" and kinds["description"] == "text"
    body, errors = forms.body_of({"acl": "bind:a.example\n\n bind:b.example ",
                                  "description": "", "metadata": "m"}, widgets)
    assert body == {"acl": ["bind:a.example", "bind:b.example"], "metadata": "m"}
    assert errors == {}
    rules = forms.create_widgets(catalog.BY_COLLECTION["ip_restrictions"])
    by_name = {w.name: w for w in rules}
    assert by_name["type"].choices == ("dashboard", "api", "agent", "endpoints")
    assert by_name["type"].required and not by_name["enforced"].required
    body, _ = forms.body_of({"enforced": "false", "type": "api"}, rules)
    assert body == {"enforced": False, "type": "api"}
    dest = forms.create_widgets(catalog.BY_COLLECTION["event_destinations"])
    body, errors = forms.body_of({"target": '{"log": {}}'}, dest)
    assert body == {"target": {"log": {}}}
    _, errors = forms.body_of({"target": "{"}, dest)
    assert "not valid JSON" in errors["target"]
    backend = forms.create_widgets(catalog.BY_COLLECTION["backends/http_response"])
    body, _ = forms.body_of({"status_code": "204", "body": "x"}, backend)
    assert body == {"status_code": 204, "body": "x"}
    body, _ = forms.body_of({"status_code": "two"}, backend)  # (the API says why)
    assert body == {"status_code": "two"}
    assert forms.input_of("acl[0]") == "acl" and forms.input_of("target.log") == "target"
