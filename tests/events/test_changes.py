"""Change events, written with the change they describe and delivered to a Datadog intake
stand-in: every write of a subscribed kind, in order, carrying the resource as the API renders
it and the API key that made it; nothing for a write that was rolled back."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from typing import Any

import httpx

from tests.events.capture import DD_KEY, Capture
from tests.events.conftest import delivery, made, subscribed, wait_for, wait_len
from tests.server import Server

STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def monitoring(tags: str, **extra: Any) -> dict[str, Any]:
    return {"monitoring": {"api_key": DD_KEY, "tags": tags, "service": "edge-test", **extra}}


def arrived(cap: Capture, tags: str) -> list[dict[str, Any]]:
    """Envelopes that reached the Datadog stand-in for entries tagged ``tags``."""
    out = []
    for r in cap.of("/api/v2/logs", 202):
        for entry in r.json():
            if entry["ddtags"] == tags:
                out.append(entry)
    return out


def test_changes_arrive_in_order_with_the_rendered_resource(esrv: Server, api: httpx.Client,
                                                            cap: Capture) -> None:
    tags = f"run:{secrets.token_hex(4)}"
    types = ["ip_policy_created.v0", "ip_policy_updated.v0", "ip_policy_deleted.v0",
             "api_key_created.v0", "api_key_deleted.v0"]
    with subscribed(api, monitoring(tags), [{"type": t} for t in types]) as dest:
        policy = made(api, "/ip_policies", {"description": "office"})
        changed = api.patch(f"/ip_policies/{policy['id']}", json={"metadata": "m1"}).json()
        assert api.delete(f"/ip_policies/{policy['id']}").status_code == 204
        key = made(api, "/api_keys", {"description": "ci"})
        # the caller's own admin key is the last one: deleting it is refused after the
        # delete ran in its transaction, which rolls back, event row included
        mine = f"ak_{esrv.token.split('_')[0]}"
        assert api.delete(f"/api_keys/{key['id']}").status_code == 204
        assert api.delete(f"/api_keys/{mine}").status_code == 400
        entries = wait_len("five events", lambda: arrived(cap, tags), 5)
        evs = [e["event"] for e in entries]
        assert [e["event_type"] for e in evs] == [
            "ip_policy_created.v0", "ip_policy_updated.v0", "ip_policy_deleted.v0",
            "api_key_created.v0", "api_key_deleted.v0"]
        assert evs[0]["object"] == policy and evs[1]["object"] == changed
        assert evs[2]["object"] == changed  # the resource as it was when deleted
        shown = {k: v for k, v in key.items() if k != "token"}
        assert {**evs[3]["object"], "token": None} == {**shown, "token": None}
        assert evs[3]["object"]["token"] is None and key["token"] not in str(entries)
        _check_envelopes(cap, entries, mine)
        state = wait_for("the delivery state", lambda: d if (d := delivery(api, dest["id"]))
                         ["delivered"] >= 5 else None)
        assert state["backlog"] == 0 and state["last_success_at"] and not state["attempts"]
        assert len(arrived(cap, tags)) == 5  # and no more: none for the refused delete


def _check_envelopes(cap: Capture, entries: list[dict[str, Any]], key_id: str) -> None:
    """The envelope of each event, and the Datadog entries around them."""
    evs = [e["event"] for e in entries]
    for e in evs:
        assert e["actor"] == {"api_key_id": key_id, "owner_id": e["actor"]["owner_id"]}
        assert e["actor"]["owner_id"].startswith("usr_")
        assert e["event_id"].startswith("ev_") and STAMP.match(e["event_timestamp"])
    assert len({e["event_id"] for e in evs}) == len(evs)
    for e, ev in zip(entries, evs, strict=True):
        assert e["ddsource"] == "edgeway" and e["service"] == "edge-test"
        assert e["message"] == ev["event_type"]
    wire = cap.of("/api/v2/logs", 202)[-1]
    assert wire.headers["content-type"] == "application/json"
    assert wire.headers["content-encoding"] == "gzip"


def test_filters_pick_changes_and_unsubscribed_types_stay_home(api: httpx.Client,
                                                               cap: Capture) -> None:
    tags = f"run:{secrets.token_hex(4)}"
    sources = [{"type": "ip_policy_created.v0", "filter": 'obj.description == "audit-me"'}]
    with subscribed(api, monitoring(tags), sources):
        made(api, "/ip_policies", {"description": "skip-me"})
        wanted = made(api, "/ip_policies", {"description": "audit-me"})
        other = made(api, "/ip_policies", {"description": "audit-me"})
        api.patch(f"/ip_policies/{wanted['id']}", json={"description": "audit-me"})
        entries = wait_len("two events", lambda: arrived(cap, tags), 2)
        ids = [e["event"]["object"]["id"] for e in entries]
        assert ids == [wanted["id"], other["id"]]
        made(api, "/ip_policies", {"description": "audit-me-not"})
        sentinel = made(api, "/ip_policies", {"description": "audit-me"})
        wait_len("the sentinel", lambda: arrived(cap, tags), 3)
        last = [e["event"] for e in arrived(cap, tags)]
        assert [e["object"]["id"] for e in last] == [wanted["id"], other["id"], sentinel["id"]]
        assert {e["event_type"] for e in last} == {"ip_policy_created.v0"}


def test_a_secret_event_names_its_vault_as_it_is_now(api: httpx.Client, cap: Capture) -> None:
    """In the event's object and in the subscription's filter, after a rename."""
    tags, old, new = f"run:{secrets.token_hex(4)}", f"v-{secrets.token_hex(4)}", \
        f"w-{secrets.token_hex(4)}"
    vault = made(api, "/vaults", {"name": old})
    secret = made(api, "/vault_secrets", {"vault_id": vault["id"], "name": "s", "value": "x"})
    sources = [{"type": "secret_updated.v0", "filter": f'obj.vault_name == "{new}"'}]
    with subscribed(api, monitoring(tags), sources):
        assert api.patch(f"/vaults/{vault['id']}", json={"name": new}).status_code == 200
        shown = api.patch(f"/vault_secrets/{secret['id']}", json={"metadata": "m"}).json()
        [entry] = wait_len("the event", lambda: arrived(cap, tags), 1)
        assert entry["event"]["object"] == shown and shown["vault_name"] == new
    assert api.delete(f"/vault_secrets/{secret['id']}").status_code == 204
    assert api.delete(f"/vaults/{vault['id']}").status_code == 204


def test_api_keys_made_by_the_command_line_have_their_event(esrv: Server, api: httpx.Client,
                                                           cap: Capture) -> None:
    tags = f"run:{secrets.token_hex(4)}"
    store = ["--data-dir", str(esrv.data_dir)]
    if esrv.database_url:
        store += ["--database-url", esrv.database_url]
    with subscribed(api, monitoring(tags), [{"type": "api_key_created.v0"}]):
        made_ = subprocess.run([sys.executable, "-m", "edgeway", "api-keys", "create",
                                "--description", "from a script", *store],
                               capture_output=True, text=True, timeout=60,
                               env={**os.environ, "EDGEWAY_PUBLIC_URL": esrv.base_url})
        assert made_.returncode == 0, made_.stderr
        token = made_.stdout.strip()
        got = wait_len("the event", lambda: arrived(cap, tags), 1)
    ev = got[0]["event"]
    assert ev["actor"] is None and ev["object"]["description"] == "from a script"
    assert ev["object"]["id"] == f"ak_{token.split('_')[0]}" and ev["object"]["token"] is None
    assert ev["object"]["uri"] == f"{esrv.base_url}/api_keys/{ev['object']['id']}"
    assert token not in str(got)
    api.delete(f"/api_keys/{ev['object']['id']}")


def test_abuse_reports_filed_and_decided_are_events(api: httpx.Client, cap: Capture) -> None:
    """Admins hear of a report as it is filed and of each decision, with the report as the API
    renders it."""
    tags = f"run:{secrets.token_hex(4)}"
    sources = [{"type": "abuse_report_created.v0"}, {"type": "abuse_report_updated.v0"}]
    with subscribed(api, monitoring(tags), sources):
        report = made(api, "/abuse_reports", {"urls": ["https://phish.example.com/login"]})
        decided = api.patch(f"/abuse_reports/{report['id']}", json={
            "hostnames": [{"hostname": "phish.example.com", "status": "BANNED"}]}).json()
        got = wait_len("the events", lambda: arrived(cap, tags), 2)
    assert [e["event"]["event_type"] for e in got] == ["abuse_report_created.v0",
                                                       "abuse_report_updated.v0"]
    assert [e["event"]["object"] for e in got] == [report, decided]
    assert decided["status"] == "PROCESSED"
