"""The per-packet cipher and MAC work of the gateway's connections, with each key set up once
per key exchange instead of once per packet.

asyncssh builds a new ``AESGCM`` (its key schedule included) for every AES-GCM packet and a
new Python ``hmac`` object (two hash objects and their key pads) for every HMAC; at the
gateway's packet sizes that is most of the cost: 3.5 to 5 µs a 200-byte packet sealed or
opened, against about 2 to 3 µs with the key material kept (``cryptography``'s ``AESGCM``
and ``HMAC``, whose ``copy`` starts each packet from the keyed state), measured in a quiet
moment; more on a loaded core. The packets are the same bytes: these classes do what
asyncssh's ``GCMEncryption``, ``BasicEncryption`` and ``ETMEncryption`` do (RFC 5647 with
OpenSSH's ``aes*-gcm@openssh.com`` layout, RFC 4253 §6 and OpenSSH's encrypt-then-MAC), for
the algorithms the gateway offers (``server.ENCRYPTION``, ``server.MACS``); any other pair
is asyncssh's own.

``install`` puts ``get_encryption`` in place of asyncssh's in ``asyncssh.connection`` (where
its key exchange calls it), for every asyncssh connection of the process: the gateway's are
the only ones ``edgeway serve`` makes. tests/sshgw/test_ciphers.py checks each pair against
asyncssh's own classes both ways; the gateway's tests run the real OpenSSH client over each.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncssh.connection
import asyncssh.encryption
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

GCM = (b"aes128-gcm@openssh.com", b"aes256-gcm@openssh.com")
CTR = (b"aes128-ctr", b"aes192-ctr", b"aes256-ctr")
HASHES: dict[bytes, type[hashes.HashAlgorithm]] = {
    b"hmac-sha2-256": hashes.SHA256, b"hmac-sha2-512": hashes.SHA512,
    b"hmac-sha2-256-etm@openssh.com": hashes.SHA256,
    b"hmac-sha2-512-etm@openssh.com": hashes.SHA512}
COUNTER = (1 << 64) - 1  # the invocation counter of the GCM nonce (RFC 5647 §7.1)


class Gcm:
    """AES-GCM (``aes*-gcm@openssh.com``): the packet length is authenticated, not encrypted;
    the nonce is the IV's fixed 4 bytes and a 64-bit counter that each packet moves on."""

    def __init__(self, key: bytes, iv: bytes) -> None:
        self._aead = AESGCM(key)
        self._fixed = iv[:4]
        self._counter = int.from_bytes(iv[4:], "big")

    def _nonce(self) -> bytes:
        nonce = self._fixed + self._counter.to_bytes(8, "big")
        self._counter = (self._counter + 1) & COUNTER
        return nonce

    def encrypt_packet(self, seq: int, header: bytes, packet: bytes) -> tuple[bytes, bytes]:
        # (the tag stays at the end of the sealed bytes: the packet and its MAC are sent
        # one after the other)
        return header + self._aead.encrypt(self._nonce(), packet, header), b""

    def decrypt_header(self, seq: int, first_block: bytes, header_len: int
                       ) -> tuple[bytes, bytes]:
        return first_block, first_block[:header_len]

    def decrypt_packet(self, seq: int, first: bytes, rest: bytes, header_len: int,
                       mac: bytes) -> bytes | None:
        nonce = self._nonce()
        try:
            return self._aead.decrypt(nonce, first[header_len:] + rest + mac,
                                      first[:header_len])
        except InvalidTag:
            return None


class Ctr:
    """AES-CTR with an HMAC over the sequence number and the plain packet (RFC 4253 §6.4);
    one direction of a connection (its key stream runs on from packet to packet)."""

    def __init__(self, key: bytes, iv: bytes, hash_alg: type[hashes.HashAlgorithm],
                 mac_key: bytes) -> None:
        cipher = Cipher(algorithms.AES(key), modes.CTR(iv))
        self._encrypt = cipher.encryptor().update
        self._decrypt = cipher.decryptor().update
        self._keyed = hmac.HMAC(mac_key, hash_alg())

    def _mac(self, seq: int, data: bytes) -> hmac.HMAC:
        h = self._keyed.copy()
        h.update(seq.to_bytes(4, "big"))
        h.update(data)
        return h

    def _verified(self, seq: int, data: bytes, mac: bytes) -> bool:
        try:
            self._mac(seq, data).verify(mac)
        except InvalidSignature:
            return False
        return True

    def encrypt_packet(self, seq: int, header: bytes, packet: bytes) -> tuple[bytes, bytes]:
        packet = header + packet
        return self._encrypt(packet), self._mac(seq, packet).finalize()

    def decrypt_header(self, seq: int, first_block: bytes, header_len: int
                       ) -> tuple[bytes, bytes]:
        first_block = self._decrypt(first_block)
        return first_block, first_block[:header_len]

    def decrypt_packet(self, seq: int, first: bytes, rest: bytes, header_len: int,
                       mac: bytes) -> bytes | None:
        packet = first + self._decrypt(rest)
        return packet[header_len:] if self._verified(seq, packet, mac) else None


class CtrEtm(Ctr):
    """AES-CTR, the HMAC over the sequence number, the clear length and the encrypted rest
    (OpenSSH's ``-etm@openssh.com`` MACs)."""

    def encrypt_packet(self, seq: int, header: bytes, packet: bytes) -> tuple[bytes, bytes]:
        packet = header + self._encrypt(packet)
        return packet, self._mac(seq, packet).finalize()

    def decrypt_header(self, seq: int, first_block: bytes, header_len: int
                       ) -> tuple[bytes, bytes]:
        return first_block, first_block[:header_len]

    def decrypt_packet(self, seq: int, first: bytes, rest: bytes, header_len: int,
                       mac: bytes) -> bytes | None:
        packet = first + rest
        return self._decrypt(packet[header_len:]) if self._verified(seq, packet, mac) \
            else None


def get_encryption(enc_alg: bytes, key: bytes, iv: bytes, mac_alg: bytes = b"",
                   mac_key: bytes = b"", etm: bool = False) -> Any:
    """What asyncssh's ``get_encryption`` returns, for one direction of a connection: these
    classes for the gateway's algorithms, asyncssh's own for any other."""
    if enc_alg in GCM:
        return Gcm(key, iv)
    hash_alg = HASHES.get(mac_alg)
    if enc_alg in CTR and hash_alg is not None:
        return (CtrEtm if etm else Ctr)(key, iv, hash_alg, mac_key)
    return ASYNCSSH(enc_alg, key, iv, mac_alg, mac_key, etm)


ASYNCSSH: Callable[..., Any] = asyncssh.encryption.get_encryption  # (where it is defined)


def install() -> None:
    """asyncssh's key exchanges make their packets' encryption with ``get_encryption``."""
    asyncssh.connection.get_encryption = get_encryption  # type: ignore[attr-defined]
