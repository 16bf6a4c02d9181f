"""Backends compiled from stored documents pick what they should, without sockets: fixed
answers and static addresses as stored, failover in order past the dead, weighted draws in
proportion among the live, nesting cut at a bounded depth (a cycle picks nothing)."""

from __future__ import annotations

import collections
import random

from edgeway.edge import backends
from edgeway.edge.backends import Static, compile_backend
from edgeway.edge.pages import Fixed
from edgeway.tunnel.registry import Registry


def _compiled(docs: dict[str, tuple[str, dict[str, object]]]) -> dict[str, backends.Backend]:
    return {id_: compile_backend(collection, doc) for id_, (collection, doc) in docs.items()}


def test_fixed_and_static_backends_pick_what_is_stored() -> None:
    snap = _compiled({
        "bkdhr_a": ("backends/http_response", {"status_code": 418, "headers": {"x": "1"},
                                               "body": "teapot"}),
        "bkdst_b": ("backends/static", {"address": "[::1]:8443", "tls": {"enabled": True}}),
    })
    reg = Registry()
    assert backends.pick(snap, "bkdhr_a", reg) == Fixed(418, (("x", "1"),), b"teapot")
    assert backends.pick(snap, "bkdst_b", reg) == Static("::1", 8443, True)
    assert backends.pick(snap, "bkdst_missing", reg) is None


def test_failover_takes_the_first_live_backend_in_order() -> None:
    snap = _compiled({
        "bkdtg_dead": ("backends/tunnel_group", {"labels": {"site": "none"}}),
        "bkdst_one": ("backends/static", {"address": "127.0.0.1:1"}),
        "bkdst_two": ("backends/static", {"address": "127.0.0.1:2"}),
        "bkdfo_f": ("backends/failover", {"backends": ["bkdtg_dead", "bkdst_gone",
                                                       "bkdst_one", "bkdst_two"]}),
    })
    assert backends.pick(snap, "bkdfo_f", Registry()) == Static("127.0.0.1", 1, False)


def test_weighted_draws_in_proportion_among_the_live_only() -> None:
    snap = _compiled({
        "bkdst_one": ("backends/static", {"address": "127.0.0.1:1"}),
        "bkdst_three": ("backends/static", {"address": "127.0.0.1:3"}),
        "bkdtg_dead": ("backends/tunnel_group", {"labels": {"site": "none"}}),
        "bkdwt_w": ("backends/weighted", {"backends": {"bkdst_one": 1, "bkdst_three": 3,
                                                       "bkdtg_dead": 100, "bkdst_off": 0}}),
    })
    random.seed(7)
    reg = Registry()
    seen = collections.Counter(backends.pick(snap, "bkdwt_w", reg) for _ in range(4000))
    ports = {t.port: n for t, n in seen.items() if isinstance(t, Static)}
    assert set(ports) == {1, 3} and sum(ports.values()) == 4000
    assert 2.5 < ports[3] / ports[1] < 3.6


def test_a_cycle_of_backends_picks_nothing() -> None:
    snap = _compiled({
        "bkdfo_a": ("backends/failover", {"backends": ["bkdfo_b"]}),
        "bkdfo_b": ("backends/failover", {"backends": ["bkdfo_a"]}),
    })
    assert backends.pick(snap, "bkdfo_a", Registry()) is None
