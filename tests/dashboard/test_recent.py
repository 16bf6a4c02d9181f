"""The memory behind the Traffic page stays bounded whatever the traffic: the newest
``per_endpoint`` requests of each endpoint, the endpoints served last kept when there are
too many, the endpoint served last listed first, each row as the edge saw it."""

from __future__ import annotations

from edgeway.recent import RecentTraffic


def test_requests_and_endpoints_are_bounded_and_newest_first() -> None:
    recent = RecentTraffic(per_endpoint=3, endpoints=2)
    for i in range(5):
        recent.served("tn_a", b"GET", b"/a%d" % i, 200, "127.0.0.1", 4000 + i, 0.0015, "https",
                      "", "https://a.example")
    recent.served("tn_b", b"POST", b"/b" + b"x" * 1000, 502, "::1", 1, 0.2, "http", "",
                  "http://b.example")
    [(key, label, rows), (other, _, older)] = recent.endpoints()
    assert (key, label, other) == ("tn_b", "http://b.example", "tn_a")
    assert [r.target for r in older] == ["/a4", "/a3", "/a2"]  # (three, newest first)
    assert (older[0].client, older[0].ms, older[0].status) == ("127.0.0.1:4004", 1.5, 200)
    assert (rows[0].method, len(rows[0].target), rows[0].ms) == ("POST", 256, 200.0)
    recent.served("tn_a", b"GET", b"/again", 200, "127.0.0.1", 1, 0.0, "https", "", "")
    recent.served("edghts_c", b"GET", b"/", 404, "127.0.0.1", 1, 0.0, "https", "rt", "")
    assert [k for k, _, _ in recent.endpoints()] == ["edghts_c", "tn_a"]  # (b served least
    # recently: the one let go)
