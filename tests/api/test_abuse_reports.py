"""Abuse reports: filed by any key that may write, read back by id, listed and decided by
admins only; each hostname of the URLs is decided on its own and the report's status follows;
bad input is refused naming the member; every write is a change event."""

from __future__ import annotations

from typing import Any

import httpx

from tests.server import Server


def filed(api: httpx.Client, *urls: str, **extra: Any) -> dict[str, Any]:
    r = api.post("/abuse_reports", json={"urls": list(urls), **extra})
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def test_a_report_lists_its_hostnames_and_follows_their_decisions(api: httpx.Client) -> None:
    made = filed(api, "https://Phish.example.com/login?x=1", "http://phish.example.com/",
                 "tcp://1.2.3.4:20001", metadata='{"ticket": 7}')
    assert made["id"].startswith("abrp_") and made["uri"].endswith(f"/abuse_reports/{made['id']}")
    assert made["urls"][0] == "https://Phish.example.com/login?x=1"
    assert made["metadata"] == '{"ticket": 7}' and made["status"] == "PENDING"
    assert made["hostnames"] == [{"hostname": "phish.example.com", "status": "PENDING"},
                                 {"hostname": "1.2.3.4:20001", "status": "PENDING"}]
    assert api.get(f"/abuse_reports/{made['id']}").json() == made
    assert made["id"] in [r["id"] for r in api.get("/abuse_reports").json()["abuse_reports"]]
    one = api.patch(f"/abuse_reports/{made['id']}", json={
        "hostnames": [{"hostname": "PHISH.example.com", "status": "BANNED"}]})
    assert one.status_code == 200, one.text
    assert one.json()["status"] == "PARTIALLY_PROCESSED"
    assert one.json()["hostnames"] == [{"hostname": "phish.example.com", "status": "BANNED"},
                                       {"hostname": "1.2.3.4:20001", "status": "PENDING"}]
    both = api.patch(f"/abuse_reports/{made['id']}", json={
        "hostnames": [{"hostname": "1.2.3.4:20001", "status": "IGNORE"}]}).json()
    assert both["status"] == "PROCESSED" and both["urls"] == made["urls"]
    # the answer of a GET sent back untouched changes nothing
    again = api.patch(f"/abuse_reports/{made['id']}", json={"hostnames": both["hostnames"]})
    assert again.status_code == 200 and again.json() == both


def test_bad_reports_are_refused_naming_the_member(api: httpx.Client) -> None:
    made = filed(api, "https://bad.example.com/")
    bodies: tuple[tuple[dict[str, Any], str], ...] = (({}, "urls"), ({"urls": []}, "urls"),
                         ({"urls": ["https://ok.example.com", "ftp://x.example.com/"]},
                          "urls[1]"),
                         ({"urls": ["not a url"]}, "urls[0]"),
                         ({"urls": ["https://"]}, "urls[0]"),
                         ({"urls": ["tcp://1.2.3.4"]}, "urls[0]"),
                         ({"urls": ["https://x.example.com/" + "a" * 3000]}, "urls[0]"),
                         ({"urls": [f"https://h{i}.example.com" for i in range(101)]}, "urls"),
                         ({"urls": ["https://x.example.com"], "metadata": "m" * 5000},
                          "metadata"),
                         ({"urls": ["https://x.example.com"], "status": "PROCESSED"},
                          "status"))
    for body, member in bodies:
        r = api.post("/abuse_reports", json=body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["details"].get("member", "") == member or member in r.json()["msg"], \
            (body, r.text)
    bodies = (({"hostnames": [{"hostname": "other.example.com", "status": "BANNED"}]},
                "hostnames[0].hostname"),
              ({"hostnames": [{"hostname": "bad.example.com", "status": "NUKED"}]},
               "hostnames"),
              ({"urls": ["https://else.example.com"]}, "urls"))
    for body, member in bodies:
        r = api.patch(f"/abuse_reports/{made['id']}", json=body)
        assert r.status_code == 400, (body, r.text)
        assert member in r.text, (body, r.text)
    assert api.get(f"/abuse_reports/{made['id']}").json() == made  # nothing half-written
    assert api.delete(f"/abuse_reports/{made['id']}").status_code in (404, 405)


def test_only_admins_list_and_decide(server: Server, api: httpx.Client) -> None:
    keys = {role: api.post("/api_keys", json={"role": role}).json()
            for role in ("operator", "read_only")}
    try:
        with server.client(keys["operator"]["token"]) as op:
            made = filed(op, "https://spam.example.com/")
            assert op.get(f"/abuse_reports/{made['id']}").json()["id"] == made["id"]
            for r in (op.get("/abuse_reports"), op.get("/abuse_reports/"),
                      op.patch(f"/abuse_reports/{made['id']}", json={"hostnames": []})):
                assert r.status_code == 403 and "admin key" in r.json()["msg"], r.text
        with server.client(keys["read_only"]["token"]) as ro:
            assert ro.post("/abuse_reports", json={"urls": ["https://a.example.com"]}) \
                .status_code == 403
            assert ro.get(f"/abuse_reports/{made['id']}").status_code == 200
            assert ro.get("/abuse_reports").status_code == 403
        assert made["id"] in [r["id"] for r in api.get("/abuse_reports").json()["abuse_reports"]]
    finally:
        for made_key in keys.values():
            api.delete(f"/api_keys/{made_key['id']}")


def test_the_ngrok_dialect_answers_in_the_references_shape(api: httpx.Client) -> None:
    r = api.post("/abuse_reports", json={"urls": ["https://x.example.com/a"]},
                 headers={"Ngrok-Version": "2"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {"id", "uri", "created_at", "urls", "metadata", "status", "hostnames"}
    got = api.get(f"/abuse_reports/{body['id']}", headers={"Ngrok-Version": "2"})
    assert got.json() == body
