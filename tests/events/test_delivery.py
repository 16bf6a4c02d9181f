"""Delivery when targets misbehave: a target that is down for a while gets every event once,
in order, when it is back; refused credentials are visible on the destination and in the log,
and after the attempts the events are dead letters, sent again on request; ``verify`` sends a
real test event and reports the target's answer; changing a destination ends its back-off."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx

from tests.events.capture import DD_KEY, Capture
from tests.events.conftest import (
    AWS_ENV,
    delivery,
    event_args,
    made,
    subscribed,
    wait_for,
    wait_len,
)
from tests.events.test_changes import arrived, monitoring
from tests.server import Server, start, trust


def envelopes(cap: Capture, tags: str) -> list[dict[str, Any]]:
    return [e["event"] for e in arrived(cap, tags)]


def test_a_target_down_then_up_gets_every_event_once_in_order(api: httpx.Client,
                                                              cap: Capture) -> None:
    tags = f"run:{secrets.token_hex(4)}"
    with subscribed(api, monitoring(tags), [{"type": "ip_policy_created.v0"}]) as dest:
        cap.down()
        try:
            first = [made(api, "/ip_policies", {"description": f"d{i}"}) for i in range(5)]
            state = wait_for("a failed attempt", lambda: d if (
                d := delivery(api, dest["id"]))["attempts"] >= 1 else None)
            assert state["backlog"] == 5 and state["retry_at"]
            assert "unreachable" in state["last_error"], state
            later = [made(api, "/ip_policies", {"description": f"d{i}"}) for i in range(5, 8)]
        finally:
            cap.up()
        got = wait_len("every event", lambda: envelopes(cap, tags), 8)
        assert [e["object"]["id"] for e in got] == [p["id"] for p in first + later]
        assert len({e["event_id"] for e in got}) == 8
        state = wait_for("the recovery", lambda: d if (
            d := delivery(api, dest["id"]))["delivered"] >= 8 else None)
        assert state["attempts"] == 0 and state["backlog"] == 0 and state["dead_letters"] == 0


def test_refused_credentials_then_dead_letters_then_resent(esrv: Server, api: httpx.Client,
                                                           cap: Capture) -> None:
    tags = f"run:{secrets.token_hex(4)}"
    target = {"monitoring": {"api_key": "wrong-key", "tags": tags}}
    with subscribed(api, target, [{"type": "ip_policy_created.v0"}]) as dest:
        made_ = [made(api, "/ip_policies", {"description": f"x{i}"}) for i in range(3)]
        state = wait_for("dead letters", lambda: d if (
            d := delivery(api, dest["id"]))["dead_letters"] >= 3 else None)
        assert "403" in state["last_error"] and state["backlog"] == 0
        log = esrv.log()
        assert f'"destination":"{dest["id"]}"' in log and "event_dead_lettered" in log
        assert "event_delivery_failed" in log
        page = api.get(f"/event_destinations/{dest['id']}/dead_letters",
                       params={"limit": "2"}).json()
        assert [d["event"]["object"]["id"] for d in page["dead_letters"]] == \
            [made_[2]["id"], made_[1]["id"]]
        assert page["next_page_uri"] and "403" in page["dead_letters"][0]["error"]
        rest = httpx.get(page["next_page_uri"], headers=api.headers, verify=trust()).json()
        assert [d["event"]["object"]["id"] for d in rest["dead_letters"]] == [made_[0]["id"]]
        assert rest["next_page_uri"] is None
        fixed = api.patch(f"/event_destinations/{dest['id']}",
                          json={"target": {"monitoring": {"api_key": DD_KEY, "tags": tags}}})
        assert fixed.status_code == 200
        one = page["dead_letters"][1]["id"]  # made_[1]
        r = api.post(f"/event_destinations/{dest['id']}/dead_letters/resend",
                     json={"ids": [one]})
        assert r.json() == {"resent": 1}
        wait_len("the one resent", lambda: envelopes(cap, tags), 1)
        r = api.post(f"/event_destinations/{dest['id']}/dead_letters/resend")
        assert r.json() == {"resent": 2}
        got = wait_len("the rest", lambda: envelopes(cap, tags), 3)
        assert [e["object"]["id"] for e in got] == [made_[1]["id"], made_[0]["id"],
                                                    made_[2]["id"]]
        assert delivery(api, dest["id"])["dead_letters"] == 0
        bad = api.post(f"/event_destinations/{dest['id']}/dead_letters/resend",
                       json={"ids": ["nope"]})
        assert bad.status_code == 400 and "ids[0]" in bad.json()["msg"]


def test_verify_sends_a_real_test_event(api: httpx.Client, cap: Capture) -> None:
    tags = f"run:{secrets.token_hex(4)}"
    good = made(api, "/event_destinations", {"target": monitoring(tags)})
    r = api.post(f"/event_destinations/{good['id']}/verify")
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["delivered"] is True and out["target"] == "monitoring"
    assert out["answer"].startswith("202")
    sent = wait_len("the test event", lambda: envelopes(cap, tags), 1)
    assert sent[0]["event_type"] == "test_event.v0" and sent[0]["event_id"] == out["event_id"]
    assert sent[0]["object"]["destination"]["id"] == good["id"]
    bad = made(api, "/event_destinations", {"target": {"monitoring": {"api_key": "nope"}}})
    out = api.post(f"/event_destinations/{bad['id']}/verify", json={}).json()
    assert out["delivered"] is False and out["permanent"] is True and "403" in out["answer"]
    assert api.post(f"/event_destinations/{bad['id']}/verify",
                    json={"x": 1}).status_code == 400
    assert api.post("/event_destinations/ed_" + "0" * 27 + "/verify").status_code == 404
    for d in (good, bad):
        api.delete(f"/event_destinations/{d['id']}")


def test_changing_a_destination_ends_its_back_off(tmp_path: Path, cap: Capture,
                                                  moto: str) -> None:
    tags = f"run:{secrets.token_hex(4)}"
    srv = start(tmp_path / "srv", None, *event_args(cap, moto), "--events-retry", "60",
                env=AWS_ENV)
    try:
        with srv.client() as api, subscribed(api, {"monitoring": {
                "api_key": "wrong-key", "tags": tags}}, [{"type": "ip_policy_created.v0"}]) \
                as dest:
            made(api, "/ip_policies", {})
            state = wait_for("a failed attempt", lambda: d if (
                d := delivery(api, dest["id"]))["attempts"] else None)
            assert state["retry_at"] and "403" in state["last_error"]
            api.patch(f"/event_destinations/{dest['id']}", json={
                "target": {"monitoring": {"api_key": DD_KEY, "tags": tags}}})
            wait_len("the event, long before its retry was due", lambda: envelopes(cap, tags),
                     1, timeout=10)
    finally:
        assert srv.stop() == 0
