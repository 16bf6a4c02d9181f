"""The gateway's packet encryption (``edgeway/sshgw/ciphers.py``) against asyncssh's own, for
every cipher and MAC the gateway offers: packets one side seals the other opens, both ways,
over a run of packets (the CTR key stream and the GCM counter carry on between them); a
packet changed by one bit anywhere past its length, or replayed, is refused."""

from __future__ import annotations

import os
import random

import asyncssh.connection
import asyncssh.encryption
import pytest

from edgeway.sshgw import ciphers
from edgeway.sshgw.server import ENCRYPTION, MACS

PAIRS = [(enc, mac) for enc in ENCRYPTION for mac in (MACS if "gcm" not in enc else ("",))]


def _pair(enc: str, mac: str) -> tuple[object, object, object, object, int, int]:
    """(ours, asyncssh's) for sending and for receiving on one key set, with the block size
    and the MAC size the connection would use."""
    keysize, ivsize, blocksize, mac_keysize, mac_size, etm = \
        asyncssh.encryption.get_encryption_params(enc.encode(), mac.encode())
    keys = (os.urandom(keysize), os.urandom(ivsize), mac.encode(), os.urandom(mac_keysize),
            etm)
    ours = ciphers.get_encryption(enc.encode(), *keys)
    theirs = ciphers.ASYNCSSH(enc.encode(), *keys)
    ours_in = ciphers.get_encryption(enc.encode(), *keys)
    theirs_in = ciphers.ASYNCSSH(enc.encode(), *keys)
    assert type(ours).__module__ == "edgeway.sshgw.ciphers", type(ours)
    assert type(theirs).__module__ == "asyncssh.encryption", type(theirs)
    return ours, theirs, ours_in, theirs_in, max(8, blocksize), mac_size


def _packet(rng: random.Random, blocksize: int, etm: bool) -> tuple[bytes, bytes]:
    """A packet as asyncssh's ``send_packet`` hands it over: (its length, the padded rest)."""
    payload = rng.randbytes(rng.choice((1, 40, 200, 1500, 32768)))
    padlen = -((1 if etm else 5) + len(payload)) % blocksize
    padlen += blocksize if padlen < 4 else 0
    packet = bytes([padlen]) + payload + rng.randbytes(padlen)
    return len(packet).to_bytes(4, "big"), packet


def _open(receiver: object, seq: int, wire: bytes, blocksize: int, mac_size: int
          ) -> bytes | None:
    """What asyncssh's receiving side does with ``wire`` (``_recv_pkthdr``, ``_recv_packet``):
    None when it is refused (a length decrypted with the wrong key stream does not fit)."""
    first, length = receiver.decrypt_header(seq, wire[:blocksize], 4)  # type: ignore[attr-defined]
    rest_end = 4 + int.from_bytes(length, "big")
    if rest_end + mac_size != len(wire):
        return None
    rest, mac = wire[blocksize:rest_end], wire[rest_end:]
    return receiver.decrypt_packet(seq, first, rest, 4, mac)  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize(("enc", "mac"), PAIRS)
def test_sealed_by_one_opened_by_the_other(enc: str, mac: str) -> None:
    ours, theirs, ours_in, theirs_in, blocksize, mac_size = _pair(enc, mac)
    etm = mac.endswith("-etm@openssh.com") or "gcm" in enc
    rng = random.Random(enc + mac)
    for seq in range(40):
        header, packet = _packet(rng, blocksize, etm)
        for sender, receiver in ((ours, theirs_in), (theirs, ours_in)):
            wire = b"".join(sender.encrypt_packet(seq, header, packet))  # type: ignore[attr-defined]
            assert _open(receiver, seq, wire, blocksize, mac_size) == packet, (enc, mac, seq)
        # (each side's key stream and counter moved on by one packet, in step)


@pytest.mark.parametrize(("enc", "mac"), PAIRS)
def test_a_changed_bit_or_a_replayed_packet_is_refused(enc: str, mac: str) -> None:
    rng = random.Random(mac + enc)
    etm = mac.endswith("-etm@openssh.com") or "gcm" in enc
    for trial in range(12):
        _, theirs, ours_in, _, blocksize, mac_size = _pair(enc, mac)
        header, packet = _packet(rng, blocksize, etm)
        wire = bytearray(b"".join(theirs.encrypt_packet(7, header, packet)))  # type: ignore[attr-defined]
        if trial == 0:  # a packet replayed: once is right, twice is not
            assert _open(ours_in, 7, bytes(wire), blocksize, mac_size) == packet
            assert _open(ours_in, 8, bytes(wire), blocksize, mac_size) is None
            continue
        at = rng.randrange(4 if etm else blocksize, len(wire))  # (not the length itself)
        wire[at] ^= 1 << rng.randrange(8)
        assert _open(ours_in, 7, bytes(wire), blocksize, mac_size) is None, (enc, mac, at)


def test_the_gateway_puts_them_in_asyncssh_key_exchange() -> None:
    """``edgeway serve``'s gateway module installs them where asyncssh's key exchange looks."""
    import edgeway.sshgw.server  # noqa: F401  (installs them)

    assert asyncssh.connection.get_encryption is ciphers.get_encryption  # type: ignore[attr-defined]
    other = ciphers.get_encryption(b"aes256-cbc", os.urandom(32), os.urandom(16),
                                   b"hmac-sha1", os.urandom(20), False)
    assert type(other).__module__ == "asyncssh.encryption"  # what it does not offer
