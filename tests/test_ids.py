"""Ids are time-sortable and strictly increasing; tokens are shaped and hashed."""

from __future__ import annotations

import re
import threading

from hypothesis import given
from hypothesis import strategies as st

from edgeway import ids


def _decode(text: str) -> int:
    n = 0
    for ch in text:
        n = n * 62 + ids.ALPHABET.index(ch)
    return n


def test_ids_strictly_increase_within_one_second() -> None:
    made = [ids.new_id("ipp") for _ in range(5000)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert all(re.fullmatch(r"ipp_[0-9A-Za-z]{27}", m) for m in made)


def test_ids_from_threads_are_unique() -> None:
    out: list[str] = []

    def work() -> None:
        out.extend(ids.ksuid() for _ in range(2000))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(out)) == 8000


@given(st.lists(st.floats(min_value=ids.EPOCH, max_value=ids.EPOCH + 2**32 - 1), min_size=1))
def test_timestamps_are_the_top_32_bits_and_never_go_back(times: list[float]) -> None:
    gen = ids.KsuidGenerator()
    values = [_decode(gen(t)) for t in times]
    assert values == sorted(values) and len(set(values)) == len(values)
    latest = 0
    for t, v in zip(times, values, strict=True):
        latest = max(latest, int(t) - ids.EPOCH)
        assert v >> 128 == latest or (v >> 128 == latest + 1 and v & (2**128 - 1) < 2**32)


def test_later_seconds_sort_later() -> None:
    gen = ids.KsuidGenerator()
    assert gen(ids.EPOCH + 10) < gen(ids.EPOCH + 11) < gen(ids.EPOCH + 86400 * 365 * 20)


def test_tokens() -> None:
    key = ids.new_id("ak")
    token = ids.new_token(key)
    first, second = token.split("_")
    assert first == key[3:] and len(second) == 32
    assert ids.token_hash(token) != token and len(ids.token_hash(token)) == 64
    assert ids.new_token(key) != token
    assert ids.split_id(key) == ("ak", key[3:]) and ids.split_id("ak_x") is None


def test_bound_ids_verify_only_for_their_owner() -> None:
    from edgeway.pki.seal import Sealer

    mac = Sealer(b"s" * 32).mac
    made = ids.bound_id("tn", mac, "cr_a")
    assert ids.split_id(made) is not None and made.startswith("tn_")
    assert ids.bound_to(made, "tn", mac, "cr_a")
    assert not ids.bound_to(made, "tn", mac, "cr_b")
    assert not ids.bound_to(made, "tn", Sealer(b"t" * 32).mac, "cr_a")  # another server's
    assert not ids.bound_to(made.replace("tn_", "ep_"), "tn", mac, "cr_a")
    flipped = made[:-1] + ("0" if made[-1] != "0" else "1")
    assert not ids.bound_to(flipped, "tn", mac, "cr_a")
    assert not ids.bound_to(ids.new_id("tn"), "tn", mac, "cr_a")
